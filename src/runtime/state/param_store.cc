#include "runtime/state/param_store.h"

#include <cmath>

#include "core/rng.h"

namespace px {

ParamStore ParamStore::initialize(const Graph& graph, uint64_t seed) {
  ParamStore store;
  Rng rng(seed);
  for (ValueId id : graph.params()) {
    const Value& v = graph.value(id);
    Tensor t = Tensor::empty(v.spec.shape);
    float* p = t.f32();
    for (int64_t i = 0; i < t.numel(); ++i) {
      switch (v.init.kind) {
        case ParamInit::Kind::zeros: p[i] = 0; break;
        case ParamInit::Kind::ones: p[i] = 1; break;
        case ParamInit::Kind::normal: p[i] = static_cast<float>(rng.normal() * v.init.scale); break;
        case ParamInit::Kind::uniform: p[i] = static_cast<float>((2 * rng.uniform() - 1) * v.init.scale); break;
      }
    }
    store.names_.push_back(v.name);
    store.tensors_.push_back(std::move(t));
  }
  return store;
}

ParamStore ParamStore::of(NamedTensors tensors) {
  ParamStore store;
  for (auto& [name, tensor] : tensors) {
    store.names_.push_back(name);
    store.tensors_.push_back(std::move(tensor));
  }
  return store;
}

bool ParamStore::has(const std::string& name) const {
  for (const auto& n : names_)
    if (n == name) return true;
  return false;
}

Tensor& ParamStore::at(const std::string& name) {
  return const_cast<Tensor&>(static_cast<const ParamStore*>(this)->at(name));
}

const Tensor& ParamStore::at(const std::string& name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return tensors_[i];
  fail("model has no parameter '{}'", name);
}

int64_t ParamStore::count() const {
  int64_t n = 0;
  for (const auto& t : tensors_) n += t.numel();
  return n;
}

void ParamStore::bind(const Graph& graph, std::vector<Tensor>& bound) const {
  bound.resize(graph.values().size());
  for (ValueId id : graph.params()) {
    const Tensor& t = at(graph.value(id).name);
    PX_CHECK(t.shape() == graph.spec(id).shape, "param {}", graph.value(id).name);
    bound[id] = t;
  }
}

NamedTensors ParamStore::named() const {
  NamedTensors out;
  for (size_t i = 0; i < names_.size(); ++i) out.emplace_back(names_[i], tensors_[i]);
  return out;
}

void ParamStore::load(const SafetensorsFile& file) {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (!file.contains(names_[i]))
      fail("checkpoint '{}' has no tensor '{}' that the model needs", file.path, names_[i]);
    const Tensor& src = file.at(names_[i]);
    if (src.shape() != tensors_[i].shape() || src.dtype() != DType::f32)
      fail("tensor '{}' has shape {} ({}) in checkpoint '{}', model expects {} (F32)", names_[i], src.shape(),
           dtype_name(src.dtype()), file.path, tensors_[i].shape());
  }
  for (size_t i = 0; i < names_.size(); ++i) tensors_[i].copy_from(file.at(names_[i]));
}

}  // namespace px
