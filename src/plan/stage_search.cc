#include "plan/stage_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>

#include "core/block.h"
#include "core/error.h"
#include "core/rng.h"
#include "parallel/compose.h"
#include "parallel/lower/reshard.h"
#include "parallel/memory_ledger.h"
#include "plan/simulate.h"
#include "plan/stage_layouts.h"
#include "plan/stage_probe.h"

namespace px::plan {
namespace {

using parallel::PipelineKind;
using parallel::Recompute;

using Layout = StageLayout;

// The analytic estimate of one layout with `blocks[s]` blocks on stage s.
struct Estimate {
  double step = 0;
  double peak = 0;  // the fullest stage's device
};

class StageModel {
 public:
  StageModel(const PlanRequest& request, const CostEstimator& estimator, const ProbeCosts& costs, const Layout& layout,
             const parallel::PipelineSchedule& schedule)
      : request_(request), estimator_(estimator), c_(costs), l_(layout), schedule_(schedule) {
    const ClusterSpec& cluster = *request.cluster;
    dp_link_ = cluster.link_between(0, (l_.dp - 1) * l_.tp);
    dp_per_node_ = cluster.fewest_ranks_on_a_node(l_.dp, l_.tp);
    pp_link_ = cluster.link_between(0, l_.dp * l_.tp);
    ends_link_ = cluster.link_between(0, (l_.stages - 1) * l_.dp * l_.tp);
    // Bytes a parameter element costs its rank (the memory ledger's state
    // at the layout's ZeRO stage).
    per_param_ = parallel::state_bytes(1.0, l_.zero, l_.dp, request.optimizer_slots).total();
    capacity_ = cluster.devices_share_memory
                    ? cluster.device.memory_bytes / std::min(request.ranks, cluster.devices_per_node)
                    : cluster.device.memory_bytes;
    // Stages on devices of different speeds (plan/speed_split.h): each
    // stage's compute over its slowest rank's speed, so the cuts give a
    // slower stage fewer blocks.
    speed_.assign(static_cast<size_t>(l_.stages), 1.0);
    for (int rank = 0; rank < std::min(request.ranks, cluster.devices()) && cluster.heterogeneous(); ++rank) {
      const int s = rank / (l_.dp * l_.tp);
      if (s < l_.stages) speed_[static_cast<size_t>(s)] = std::min(speed_[static_cast<size_t>(s)], cluster.relative_speed(rank));
    }
  }

  // F + B of a micro-batch, with its gradients accumulated into their
  // buckets (a copy and an add: three float32 passes over them).
  double stage_seconds(int s, int blocks) const {
    double t = blocks * c_.block.seconds();
    if (s == 0) t += c_.pre.seconds();
    if (s == l_.stages - 1) t += c_.post.seconds();
    return (t + accumulate_seconds(s, blocks)) / speed_[static_cast<size_t>(s)];
  }
  // A reduction of a stage's gradients, bucket by bucket (each pays its latency).
  double reduction_seconds(comm::Collective kind, double bytes) const {
    const double buckets = std::max(1.0, std::ceil(bytes / static_cast<double>(parallel::kDefaultBucketBytes)));
    return buckets * estimator_.collective_seconds(kind, bytes / buckets, l_.dp, dp_link_, dp_per_node_);
  }
  // The collective the resharding rule runs along dp to take a stage's
  // `bytes` from `from` to `to`, bucket by bucket (0: none, or a slice).
  double data_seconds(Placement from, Placement to, double bytes) const {
    const std::optional<comm::Collective> kind = parallel::collective_of(parallel::resharding(from, to));
    return kind ? reduction_seconds(*kind, bytes) : 0.0;
  }
  double accumulate_seconds(int s, int blocks) const {
    return estimator_.memory_seconds(3.0 * 4 * stage_params(s, blocks));
  }
  double stage_params(int s, int blocks) const {
    double w = blocks * c_.block.params;
    if (s == 0) w += c_.pre.params;
    if (s == l_.stages - 1) w += c_.post.params;
    return w;
  }
  // Micro-batches whose stash a stage holds at once: GPipe all; 1F1B P - s;
  // zb-h1 also the inputs of up to P - s - 1 deferred weight gradients;
  // interleaved, in the rank's whole stashes, its warm-up's forwards of a
  // chunk each ((P - s - 1)·2 + (V - 1)·P, parallel/pipeline_schedule.cc)
  // and the one in progress, each 1/V of the rank's blocks.
  double in_flight(int s) const {
    const int M = l_.micro_batches, P = l_.stages, V = l_.virtual_stages;
    if (l_.kind == PipelineKind::gpipe) return M;
    if (l_.kind == PipelineKind::zb_h1) return std::min(M, 2 * (P - s) - 1);
    if (l_.kind == PipelineKind::interleaved) return std::min(M * V, 2 * (P - s - 1) + (V - 1) * P + 1) / double(V);
    return std::min(M, P - s);
  }
  double stage_memory(int s, int blocks) const {
    double bytes = stage_params(s, blocks) * per_param_;
    if (l_.zero >= 3) bytes += 2 * 4 * c_.block.params;  // a block's gathered parameters, and the next one's
    const double stash = blocks * c_.block_stash + (s == 0 ? c_.boundary : 0);
    bytes += in_flight(s) * stash + c_.transient;
    if (s == l_.stages - 1) bytes += c_.post_stash;
    return bytes;
  }
  bool fits(int s, int blocks) const { return stage_memory(s, blocks) <= capacity_; }
  // The fullest stage's device.
  double peak(const std::vector<int>& blocks) const {
    double bytes = 0;
    for (int s = 0; s < l_.stages; ++s) bytes = std::max(bytes, stage_memory(s, blocks[static_cast<size_t>(s)]));
    return bytes;
  }

  Estimate estimate(const std::vector<int>& blocks) const {
    const int P = l_.stages;
    std::vector<double> F(static_cast<size_t>(P)), B(F.size()), W(F.size());
    double sync_max = 0;
    for (int s = 0; s < P; ++s) {
      const int n = blocks[static_cast<size_t>(s)];
      const double accumulate = accumulate_seconds(s, n);
      F[static_cast<size_t>(s)] = n * c_.block.forward + (s == 0 ? c_.pre.forward : 0) + (s == P - 1 ? c_.post.forward : 0);
      B[static_cast<size_t>(s)] = n * c_.block.backward + (s == 0 ? c_.pre.backward : 0) +
                                  (s == P - 1 ? c_.post.backward : 0) + accumulate;
      W[static_cast<size_t>(s)] = n * c_.block.weight + (s == 0 ? c_.pre.weight : 0) +
                                  (s == P - 1 ? c_.post.weight : 0) + accumulate;
      for (std::vector<double>* pass : {&F, &B, &W}) (*pass)[static_cast<size_t>(s)] /= speed_[static_cast<size_t>(s)];
      const double w = stage_params(s, n);
      double sync = 0;
      if (l_.dp > 1) {
        // Along dp, what the resharding rule runs at the layout's ZeRO
        // stage (parallel/lower/reshard.h transitions): the gradients'
        // reduction, which overlaps the last backward (ZeRO-2
        // reduce-scatters every micro-batch's: they are not kept whole);
        // the gather of the updated shard into whole storage (ZeRO-1/2);
        // under ZeRO-3, every block gathered before its forward and its
        // backward, each micro-batch.
        const double grads = 4 * w;
        const double scatters = l_.zero >= 2 ? l_.micro_batches : 1;
        const double reduce = scatters * data_seconds(Placement::P(), parallel::gradient_storage(l_.zero), grads);
        sync = request_.overlap ? std::max(0.0, reduce - B[static_cast<size_t>(s)]) : reduce;
        if (l_.zero >= 1) sync += data_seconds(Placement::S(0), parallel::parameter_storage(l_.zero), grads);
        sync += 2.0 * l_.micro_batches * data_seconds(parallel::parameter_storage(l_.zero), Placement::B(), 4 * w) / 2;
      }
      // The norm (a pass over the gradients), the clip (two) and the update,
      // over this rank's shard under ZeRO.
      const double shard = 4 * w / (l_.zero >= 1 ? l_.dp : 1);
      const double update = estimator_.memory_seconds(3 * shard) +
                             estimator_.update_seconds((3 + 2.0 * request_.optimizer_slots) * shard);
      sync_max = std::max(sync_max, sync + update);
    }
    double pipeline = F[0] + B[0];
    if (P > 1) {
      pipeline = replay(chunk_passes(F, blocks, PassKind::forward), chunk_passes(B, blocks, PassKind::backward),
                        chunk_passes(W, blocks, PassKind::weight), estimator_.transfer_seconds(c_.boundary, pp_link_),
                        estimator_.transfer_seconds(c_.boundary_gradient, pp_link_));
      // The tied parameters' gradient summed between the first and the last stage, at the step's end.
      if (c_.shared_params > 0)
        pipeline += estimator_.collective_seconds(comm::Collective::allreduce, 4 * c_.shared_params, 2, ends_link_, 1);
    } else {
      pipeline *= l_.micro_batches;
    }
    return {.step = pipeline + sync_max, .peak = peak(blocks)};
  }

  enum class PassKind { forward, backward, weight };
  // A rank's pass split over its V chunks, by virtual stage (chunk·P +
  // rank): each chunk its share of the rank's blocks (core/block.h's cut),
  // the embedding with virtual stage 0's and the head with the
  // last's; the gradients' accumulation shared alike. With V = 1 the
  // rank's own pass.
  std::vector<double> chunk_passes(const std::vector<double>& pass, const std::vector<int>& blocks, PassKind kind) const {
    const int P = l_.stages, V = l_.virtual_stages;
    if (V == 1) return pass;
    auto per_block = [&](const ProbePart& part) {
      return kind == PassKind::forward ? part.forward : kind == PassKind::backward ? part.backward : part.weight;
    };
    std::vector<double> out(static_cast<size_t>(P * V));
    for (int s = 0; s < P; ++s) {
      const int n = blocks[static_cast<size_t>(s)];
      const double accumulate = kind == PassKind::forward ? 0.0 : accumulate_seconds(s, n) / V;
      for (int c = 0; c < V; ++c) {
        const int vs = c * P + s;
        double t = static_cast<double>(block(n, V, c).count) * per_block(c_.block) + accumulate;
        if (vs == 0) t += per_block(c_.pre);
        if (vs == P * V - 1) t += per_block(c_.post);
        out[static_cast<size_t>(vs)] = t / speed_[static_cast<size_t>(s)];
      }
    }
    return out;
  }

  // The schedule's action lists run with each virtual stage's costs
  // (chunk_passes): forward F, backward B (zb-h1: B - W, then W when the
  // schedule runs it), a hop to the neighbouring virtual stage for every
  // activation and gradient (their own times: activations may cross in
  // bf16); sends never wait.
  double replay(const std::vector<double>& F, const std::vector<double>& B, const std::vector<double>& W,
                double activation_hop, double gradient_hop) const {
    const parallel::PipelineSchedule& schedule = schedule_;
    const int P = schedule.stages, M = schedule.micro_batches, V = schedule.virtual_stages;
    // [gradient?][micro][the receiving virtual stage]
    std::vector<double> arrival(static_cast<size_t>(2 * M * P * V), -1);
    auto slot = [&](bool gradient, int micro, int to) {
      return static_cast<size_t>(((gradient ? 1 : 0) * M + micro) * P * V + to);
    };
    std::vector<size_t> pc(static_cast<size_t>(P), 0);
    std::vector<double> t(static_cast<size_t>(P), 0);
    for (bool moved = true; moved;) {
      moved = false;
      for (int r = 0; r < P; ++r) {
        const std::vector<parallel::PipelineAction>& actions = schedule.ranks[static_cast<size_t>(r)];
        double& now = t[static_cast<size_t>(r)];
        const size_t s = static_cast<size_t>(r);
        for (size_t& i = pc[s]; i < actions.size(); ++i) {
          const parallel::PipelineAction& a = actions[i];
          using parallel::PipelineOp;
          const size_t vs = static_cast<size_t>(schedule.virtual_stage(r, a.chunk));
          if (a.op == PipelineOp::forward) now += F[vs];
          else if (a.op == PipelineOp::backward) now += B[vs];
          else if (a.op == PipelineOp::backward_input) now += B[vs] - W[vs];
          else if (a.op == PipelineOp::backward_weight) now += W[vs];
          else if (a.op == PipelineOp::send_activation || a.op == PipelineOp::send_gradient) {
            const bool gradient = a.op == PipelineOp::send_gradient;
            arrival[slot(gradient, a.micro, static_cast<int>(vs) + (gradient ? -1 : 1))] =
                now + (gradient ? gradient_hop : activation_hop);
          } else if (a.op == PipelineOp::recv_activation || a.op == PipelineOp::recv_gradient) {
            const double at = arrival[slot(a.op == PipelineOp::recv_gradient, a.micro, static_cast<int>(vs))];
            if (at < 0) break;  // waits for its neighbour
            now = std::max(now, at);
          }
          moved = true;
        }
      }
    }
    return *std::max_element(t.begin(), t.end());
  }

  // The blocks of each stage minimizing the slowest stage under every stage's
  // memory; empty when no cut fits.
  std::vector<int> best_cuts(int blocks) const {
    const int P = l_.stages;
    constexpr double kNone = std::numeric_limits<double>::infinity();
    // f[s][j]: the slowest of stages 0..s-1 holding blocks 0..j-1; choice[s][j]: stage s-1's blocks.
    std::vector<std::vector<double>> f(static_cast<size_t>(P + 1), std::vector<double>(static_cast<size_t>(blocks + 1), kNone));
    std::vector<std::vector<int>> choice(f.size(), std::vector<int>(static_cast<size_t>(blocks + 1), 0));
    f[0][0] = 0;
    for (int s = 0; s < P; ++s)
      for (int j = 0; j <= blocks; ++j) {
        if (f[static_cast<size_t>(s)][static_cast<size_t>(j)] == kNone) continue;
        const int least = l_.virtual_stages;  // a block for each of the stage's chunks
        const int most = blocks - j - least * (P - 1 - s);  // and for each later stage's
        for (int n = least; n <= most; ++n) {
          if (s == P - 1 && n != most) continue;
          if (!fits(s, n)) break;  // more blocks only need more memory
          const double t = std::max(f[static_cast<size_t>(s)][static_cast<size_t>(j)], stage_seconds(s, n));
          double& cell = f[static_cast<size_t>(s + 1)][static_cast<size_t>(j + n)];
          if (t < cell) {
            cell = t;
            choice[static_cast<size_t>(s + 1)][static_cast<size_t>(j + n)] = n;
          }
        }
      }
    if (f[static_cast<size_t>(P)][static_cast<size_t>(blocks)] == kNone) return {};
    std::vector<int> out(static_cast<size_t>(P));
    for (int s = P, j = blocks; s > 0; --s) {
      out[static_cast<size_t>(s - 1)] = choice[static_cast<size_t>(s)][static_cast<size_t>(j)];
      j -= out[static_cast<size_t>(s - 1)];
    }
    return out;
  }

  // Balanced blocks (for a layout no cut fits, to report its memory).
  std::vector<int> balanced(int blocks) const {
    std::vector<int> out(static_cast<size_t>(l_.stages), blocks / l_.stages);
    for (int s = 0; s < blocks % l_.stages; ++s) ++out[static_cast<size_t>(s)];
    return out;
  }

 private:
  const PlanRequest& request_;
  const CostEstimator& estimator_;
  const ProbeCosts& c_;
  Layout l_;
  const parallel::PipelineSchedule& schedule_;
  LinkClass dp_link_ = LinkClass::intra_node, pp_link_ = LinkClass::intra_node, ends_link_ = LinkClass::intra_node;
  int dp_per_node_ = 1;  // ClusterSpec::fewest_ranks_on_a_node of the data-parallel group
  double per_param_ = 0, capacity_ = 0;
  std::vector<double> speed_;  // each stage's slowest rank's, over the reference device's
};

parallel::Strategy strategy_of(const PlanRequest& request, const nn::Model& model, const Layout& l,
                               const std::vector<int>& blocks) {
  parallel::PipelineOptions pipeline{.schedule = l.kind, .virtual_stages = l.virtual_stages};
  // Blocks by virtual stage (chunk·P + rank, in layer order): each rank's
  // split over its chunks as chunk_passes splits them.
  const int V = l.virtual_stages;
  std::vector<int> by_virtual_stage(static_cast<size_t>(l.stages * V));
  for (int s = 0; s < l.stages && l.stages > 1; ++s)
    for (int c = 0; c < V; ++c)
      by_virtual_stage[static_cast<size_t>(c * l.stages + s)] =
          static_cast<int>(block(blocks[static_cast<size_t>(s)], V, c).count);
  for (size_t i = 0, start = 0; l.stages > 1 && i + 1 < by_virtual_stage.size(); ++i) {
    start += static_cast<size_t>(by_virtual_stage[i]);
    pipeline.stage_cuts.push_back(fmt::format("h.{}", start));
  }
  return parallel::compose({.zero_stage = l.zero,
                            .tensor_parallel = l.tp,
                            .sequence_parallel = l.sp,
                            .pipeline_parallel = l.stages,
                            .pipeline = pipeline,
                            .recompute = l.recompute,
                            .micro_batches = l.micro_batches,
                            .precision = request.space.precision},
                           {.graph = &model.graph, .batch_inputs = request.batch_inputs, .ranks = l.stages * l.dp * l.tp});
}

// describe() of the strategy the layout makes, with its blocks per stage.
std::string describe_layout(const Layout& l, const std::vector<int>& blocks) {
  std::string text = fmt::format("pp={} dp={} tp={}{}", l.stages, l.dp, l.tp, l.sp ? " sp" : "");
  if (l.micro_batches > 1) text += fmt::format(" M={}", l.micro_batches);
  if (l.stages > 1) text += fmt::format(" {}", parallel::pipeline_kind_name(l.kind));
  if (l.virtual_stages > 1) text += fmt::format(" v={}", l.virtual_stages);
  if (l.zero > 0) text += fmt::format(" zero={}", l.zero);
  if (l.recompute != Recompute::none) text += fmt::format(" recompute={}", parallel::recompute_name(l.recompute));
  if (l.stages > 1) {
    // Runs of equal stages: "6x16" for 16 stages of 6 blocks.
    std::vector<std::string> runs;
    for (size_t i = 0; i < blocks.size();) {
      size_t j = i;
      while (j < blocks.size() && blocks[j] == blocks[i]) ++j;
      runs.push_back(j - i > 1 ? fmt::format("{}x{}", blocks[i], j - i) : fmt::format("{}", blocks[i]));
      i = j;
    }
    text += fmt::format(" blocks={}", fmt::join(runs, "/"));
  }
  return text;
}

// A layout's screened figures: its best cut's estimate, or (no cut fits)
// the memory of balanced blocks and why it is rejected.
struct Scored {
  size_t index;  // in the layouts
  Layout layout;
  std::vector<int> blocks;
  Candidate candidate;
  const ProbeCosts* costs;
};

// The layout scored on its probe's costs.
Scored score(const PlanRequest& request, const CostEstimator& estimator, size_t index, const Layout& layout,
             int blocks, const ProbeCosts& costs, const parallel::PipelineSchedule& schedule) {
  const ClusterSpec& cluster = *request.cluster;
  const StageModel model(request, estimator, costs, layout, schedule);
  std::vector<int> cuts = model.best_cuts(blocks);
  if (cuts.empty()) {
    // No cut fits: balanced blocks give the memory to report. Its step is not worth a replay of the schedule
    // (at scale most layouts are these), and neither the tables nor --explain show a rejected one's.
    cuts = model.balanced(blocks);
    Candidate c{.peak_bytes = model.peak(cuts)};
    c.rejected = memory_verdict(cluster, request.ranks, c.peak_bytes);
    if (c.rejected.empty()) c.rejected = "no stage cut fits every stage's memory";
    return {index, layout, cuts, std::move(c), &costs};
  }
  const Estimate e = model.estimate(cuts);
  const double step_flops =
      static_cast<double>(layout.dp) * layout.micro_batches * (blocks * costs.block_flops + costs.base_flops);
  Candidate c{.step_seconds = e.step,
              .peak_bytes = e.peak,
              .utilization = step_flops / (e.step * request.ranks * cluster.device.flops(request.space.precision == Precision::bf16 ? DType::bf16 : DType::f32))};
  return {index, layout, cuts, std::move(c), &costs};
}

// Layouts scored in `order` until the deadline, each probe made when first
// needed (kept in `probes`, which the scores point into), fastest first.
std::vector<Scored> score_all(StageSearch& search, const std::vector<Layout>& layouts,
                              const std::vector<size_t>& order, int blocks, const Deadline& deadline,
                              std::map<ProbeKey, ProbeCosts>& probes) {
  const PlanRequest& request = *search.request;
  std::map<std::tuple<PipelineKind, int, int, int>, parallel::PipelineSchedule> schedules;
  std::vector<Scored> scored;
  for (size_t index : order) {
    const Layout& layout = layouts[index];
    if (deadline.passed()) {
      search.cut = true;
      break;
    }
    const int64_t rows = (request.batch + layout.dp - 1) / layout.dp;
    const ProbeKey key{layout.tp, layout.sp, (rows + layout.micro_batches - 1) / layout.micro_batches,
                       layout.recompute};
    auto it = probes.find(key);
    if (it == probes.end()) {
      try {
        it = probes.emplace(key, probe(request, *search.estimator, key, deadline)).first;
      } catch (const DeadlinePassed&) {
        search.cut = true;
        break;
      }
    }
    if (!it->second.error.empty()) {
      --search.considered;  // the sub-mesh does not lower this model
      continue;
    }
    const auto schedule_key = std::tuple{layout.kind, layout.stages, layout.micro_batches, layout.virtual_stages};
    auto known = schedules.find(schedule_key);
    if (known == schedules.end())
      known = schedules
                  .emplace(schedule_key, parallel::make_pipeline_schedule(layout.kind, layout.stages,
                                                                         layout.micro_batches, layout.virtual_stages))
                  .first;
    scored.push_back(score(request, *search.estimator, index, layout, blocks, it->second, known->second));
  }
  std::sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) {
    if (a.candidate.rejected.empty() != b.candidate.rejected.empty()) return a.candidate.rejected.empty();
    if (a.candidate.step_seconds != b.candidate.step_seconds) return a.candidate.step_seconds < b.candidate.step_seconds;
    return a.index < b.index;
  });
  return scored;
}

}  // namespace

std::vector<Candidate> search_stages(StageSearch& search, const Deadline& deadline) {
  const PlanRequest& request = *search.request;
  const int blocks = block_count(search.model->graph);
  if (blocks == 0) return search_graph_stages(search, deadline);
  // The space first (cheap), then each layout scored in turn until the deadline, its probe made when first needed.
  const std::vector<Layout> layouts = stage_layouts(request, blocks);
  search.considered = static_cast<int>(layouts.size());
  // Visited in a fixed shuffled order: a search the deadline cuts short has
  // sampled the whole space evenly (every mesh, micro-batch count and
  // recomputation), not finished one corner of it, which at scale holds
  // few of the layouts that fit. The ranking does not depend on it.
  std::vector<size_t> order(layouts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  Rng rng(0x5ca1e);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  std::map<ProbeKey, ProbeCosts> probes;
  std::vector<Scored> scored = score_all(search, layouts, order, blocks, deadline, probes);
  // The fastest fitting candidates get their Strategy (the others keep their
  // figures, and the rejected their reasons) while the budget allows, the
  // fastest at least; the fastest are replayed on their Programs while
  // the budget allows, judged by how long the probes took per instruction.
  std::vector<Candidate> out;
  int verified = 0, built = 0;
  constexpr int kListed = 50;  // fitting candidates given their Strategy (tables list the best)
  for (Scored& s : scored) {
    Candidate& c = s.candidate;
    if (!c.rejected.empty() || built >= kListed || (built > 0 && deadline.passed())) {
      c.description = describe_layout(s.layout, s.blocks);
      out.push_back(std::move(c));
      continue;
    }
    c.strategy = strategy_of(request, *search.model, s.layout, s.blocks);
    c.description = describe_layout(s.layout, s.blocks);
    ++built;
    const double instrs = s.layout.micro_batches * (blocks * s.costs->block_instrs + s.costs->base_instrs);
    const double expected = 2 * instrs * s.costs->seconds_per_instr;
    if (verified < request.verify && !search.cut && deadline.elapsed() + expected < 0.9 * deadline.seconds) {
      try {
        Candidate checked = evaluate(request, *search.model, c.strategy, *search.estimator, &deadline);
        ++verified;
        checked.description = c.description;
        checked.screened_step_seconds = c.step_seconds;
        checked.screened_peak_bytes = c.peak_bytes;
        out.push_back(std::move(checked));
        continue;
      } catch (const DeadlinePassed&) {
        search.cut = true;  // the screen's figures stand
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace px::plan
