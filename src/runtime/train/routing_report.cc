#include "runtime/train/routing_report.h"

#include <span>

#include "comm/collectives.h"
#include "core/error.h"

namespace px {

namespace {

// A layer's slots in the gathered vector: its stats (nn::RouterValues::stats),
// then 1 where this rank holds the layer.
int64_t stats_size(const nn::Model& model, const nn::RouterValues& r) {
  return model.graph.spec(r.stats).shape.numel();
}

}  // namespace

std::vector<LayerRouting> step_routing(const nn::Model& model, const StepResult& step, comm::Communicator* group) {
  std::vector<const nn::RouterValues*> layers;
  for (const nn::RouterValues& r : model.routers)
    if (r.stats != kNoValue) layers.push_back(&r);
  if (layers.empty()) return {};
  int64_t total = 0;
  for (const nn::RouterValues* r : layers) total += stats_size(model, *r) + 1;
  std::vector<float> sums(static_cast<size_t>(total), 0.0f);
  for (const std::vector<Tensor>& outputs : step.outputs) {
    PX_CHECK(outputs.size() >= layers.size(), "step_routing: {} outputs, {} layers' statistics", outputs.size(),
             layers.size());
    size_t next = outputs.size() - layers.size();
    int64_t at = 0;
    for (const nn::RouterValues* r : layers) {
      const int64_t n = stats_size(model, *r);
      const Tensor& t = outputs[next++];
      if (t.defined()) {  // else another pipeline stage's layer
        for (int64_t i = 0; i < n; ++i) sums[static_cast<size_t>(at + i)] += t.f32()[i];
        sums[static_cast<size_t>(at + n)] = 1;
      }
      at += n + 1;
    }
  }
  if (group != nullptr && group->size() > 1) comm::allreduce(*group, std::span<float>(sums), comm::Reduction::sum);
  std::vector<LayerRouting> out;
  int64_t at = 0;
  for (const nn::RouterValues* r : layers) {
    const int64_t n = stats_size(model, *r), E = model.graph.spec(r->load).shape.numel();
    const double holders = std::max(1.0f, sums[static_cast<size_t>(at + n)]);
    auto value = [&](int64_t i) { return sums[static_cast<size_t>(at + i)] / holders; };
    LayerRouting l{.layer = r->layer};
    for (int64_t e = 0; e < E; ++e) l.load.push_back(value(e));
    int64_t next = E;
    l.dropped = value(next++);
    if (r->aux_loss != kNoValue) l.aux_loss = value(next++);
    if (r->z_loss != kNoValue) l.z_loss = value(next++);
    out.push_back(std::move(l));
    at += n + 1;
  }
  return out;
}

nlohmann::json routing_json(const std::vector<LayerRouting>& layers) {
  nlohmann::json out = nlohmann::json::array();
  for (const LayerRouting& l : layers)
    out.push_back({{"layer", l.layer}, {"load", l.load}, {"dropped", l.dropped}, {"aux_loss", l.aux_loss},
                   {"z_loss", l.z_loss}});
  return out;
}

}  // namespace px
