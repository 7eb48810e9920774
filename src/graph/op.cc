#include "graph/op.h"

#include <algorithm>

#include "core/error.h"

namespace px {

std::string TensorSpec::str() const { return fmt::format("{}{}", dtype_name(dtype), shape.str()); }

namespace {
const ShardBox kWhole{};
}

const ShardBox& OpContext::input_box(size_t i) const { return i < inputs.size() ? inputs[i] : kWhole; }
const ShardBox& OpContext::output_box(size_t i) const { return i < outputs.size() ? outputs[i] : kWhole; }

OpRegistry& OpRegistry::instance() {
  static OpRegistry registry;
  return registry;
}

void OpRegistry::add(OpDef def) {
  PX_CHECK(!has(def.name), "op '{}' registered twice", def.name);
  PX_CHECK(static_cast<bool>(def.infer) && static_cast<bool>(def.forward), "op '{}'", def.name);
  defs_.push_back(std::make_unique<OpDef>(std::move(def)));
}

const OpDef& OpRegistry::get(const std::string& name) const {
  for (const auto& d : defs_)
    if (d->name == name) return *d;
  fail("unknown op '{}': registered ops are {}", name, fmt::join(names(), ", "));
}

bool OpRegistry::has(const std::string& name) const {
  return std::any_of(defs_.begin(), defs_.end(), [&](const auto& d) { return d->name == name; });
}

std::vector<std::string> OpRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& d : defs_) out.push_back(d->name);
  std::sort(out.begin(), out.end());
  return out;
}

OpCost streaming_cost(const std::vector<TensorSpec>& inputs, const std::vector<TensorSpec>& outputs,
                      double flops_per_output_element) {
  OpCost c;
  for (const auto& s : inputs) c.bytes_read += double(s.shape.numel()) * dtype_size(s.dtype);
  for (const auto& s : outputs) {
    c.bytes_written += double(s.shape.numel()) * dtype_size(s.dtype);
    c.flops += double(s.shape.numel()) * flops_per_output_element;
  }
  return c;
}

}  // namespace px
