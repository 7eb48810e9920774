#include "graph/attrs.h"

#include "core/error.h"

namespace px {
namespace {
template <typename T>
const T& get_as(const std::map<std::string, AttrValue>& items, const std::string& name,
                const char* type) {
  auto it = items.find(name);
  PX_CHECK(it != items.end(), "missing attribute '{}'", name);
  const T* value = std::get_if<T>(&it->second);
  PX_CHECK(value != nullptr, "attribute '{}' is not {}", name, type);
  return *value;
}
}  // namespace

int64_t Attrs::get_int(const std::string& name) const { return get_as<int64_t>(items_, name, "an int"); }
int64_t Attrs::get_int(const std::string& name, int64_t fallback) const {
  return has(name) ? get_int(name) : fallback;
}
double Attrs::get_float(const std::string& name) const {
  auto it = items_.find(name);
  if (it != items_.end()) {
    if (auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  }
  return get_as<double>(items_, name, "a float");
}
double Attrs::get_float(const std::string& name, double fallback) const {
  return has(name) ? get_float(name) : fallback;
}
const std::string& Attrs::get_string(const std::string& name) const {
  return get_as<std::string>(items_, name, "a string");
}
const std::vector<int64_t>& Attrs::get_ints(const std::string& name) const {
  return get_as<std::vector<int64_t>>(items_, name, "an int list");
}
const std::vector<double>& Attrs::get_floats(const std::string& name) const {
  return get_as<std::vector<double>>(items_, name, "a float list");
}

std::string Attrs::str() const {
  std::string out = "{";
  for (const auto& [name, value] : items_) {
    if (out.size() > 1) out += ", ";
    out += name + "=";
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>>)
            out += fmt::format("[{}]", fmt::join(v, ","));
          else
            out += fmt::format("{}", v);
        },
        value);
  }
  return out + "}";
}

}  // namespace px
