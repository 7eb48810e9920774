#include "parallel/lower/propagate.h"

#include <algorithm>

#include <limits>
#include <map>
#include <tuple>

#include "core/error.h"
#include "graph/precision.h"
#include "parallel/lower/reshard.h"

namespace px::parallel {
namespace {

constexpr int kNever = std::numeric_limits<int>::max();

std::string list(const std::vector<Placement>& placements) {
  std::string s = "(";
  for (size_t i = 0; i < placements.size(); ++i) s += (i ? ", " : "") + placements[i].str();
  return s + ")";
}

// `signature` with the groups of the split inputs it takes carried to every
// split entry (ops other than reshape never name groups themselves), and
// likewise a zigzag split (graph/placement.h) where the signature splits
// only in plain blocks and names no zigzag itself.
PlacementSignature carry_groups(const PlacementSignature& signature, const std::vector<Placement>& actual,
                                bool signatures_see_groups) {
  int groups = 0, zigzags = 0, plain = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const Placement& want = signature.inputs[i];
    if (!want.is_split() || !actual[i].is_split() || actual[i].dim != want.dim) continue;
    (actual[i].zigzag ? zigzags : plain) += 1;
    if (groups == 0) groups = actual[i].groups;
    else if (groups != actual[i].groups) groups = -1;  // they disagree: one of them is resharded
  }
  PlacementSignature carried = signature;
  auto entries = [&carried](auto&& f) {
    for (Placement& p : carried.inputs)
      if (p.is_split()) f(p);
    for (Placement& p : carried.outputs)
      if (p.is_split()) f(p);
  };
  if (!signatures_see_groups && groups > 1) entries([groups](Placement& p) { p.groups = groups; });
  bool blocks_only = zigzags > 0 && plain == 0;
  entries([&blocks_only](Placement& p) { blocks_only = blocks_only && p.groups == 1 && !p.zigzag; });
  if (blocks_only) entries([](Placement& p) { p.zigzag = true; });
  return carried;
}

// Whether every split of the signature cuts its dim into whole groups (and,
// for an even signature, every group's part evenly over `ranks`).
bool fits(const PlacementSignature& s, const std::vector<TensorSpec>& in, const std::vector<TensorSpec>& out,
          int ranks) {
  if (s.ranks > 0 && s.ranks != ranks) return false;
  auto ok = [&](const Placement& p, const TensorSpec& spec) {
    if (!p.is_split()) return true;
    if (p.dim >= spec.shape.rank()) return false;
    const int64_t n = spec.shape[p.dim];
    if (p.zigzag) return !s.even || n % (2 * ranks) == 0;
    return n % p.groups == 0 && (!s.even || (n / p.groups) % ranks == 0);
  };
  for (size_t i = 0; i < in.size(); ++i)
    if (!ok(s.inputs[i], in[i])) return false;
  for (size_t o = 0; o < out.size() && o < s.outputs.size(); ++o)
    if (!ok(s.outputs[o], out[o])) return false;
  return true;
}

}  // namespace

std::string placements_str(const AxisPlacements& placements) {
  std::string s = list(placements);
  return "[" + s.substr(1, s.size() - 2) + "]";
}

std::optional<int> resharding_cost(const Placement& from, const Placement& to) {
  if (from == to) return 0;
  if (to.is_partial()) return std::nullopt;                        // no collective makes a summand
  if (from.is_partial()) return to.is_split() ? 11 : 10;           // reduce-scatter, allreduce
  if (from.is_split() && to.is_split() && from.dim == to.dim) return 11;  // allgather, then a slice
  if (from.is_split()) return to.is_split() ? 12 : 10;             // all-to-all, allgather
  return 1;                                                        // B -> S: a local slice
}

namespace {

// One propagation: the request's graph copied node by node into out.graph,
// each node's signature chosen per axis and its inputs resharded to it.
class Propagator {
 public:
  explicit Propagator(const PlacementRequest& request)
      : request_(request), graph_(*request.graph), mesh_(*request.mesh), axes_(static_cast<int>(mesh_.axes().size())) {
    out_.value_of.assign(graph_.values().size(), kNoValue);
    out_.node_of.assign(graph_.nodes().size(), -1);
    out_.target_of.assign(request.targets.size(), kNoValue);
    target_index_.assign(graph_.values().size(), -1);
    for (size_t t = 0; t < request.targets.size(); ++t)
      target_index_[static_cast<size_t>(request.targets[t].first)] = static_cast<int>(t);
  }

  Propagation run() {
    const auto& values = graph_.values();
    Graph& g = out_.graph;
    size_t next_node = 0;
    for (size_t v = 0; v < values.size(); ++v) {
      const Value& value = values[v];
      if (value.kind != Value::Kind::activation) {
        const ValueId id = value.kind == Value::Kind::input
                               ? g.input(value.name, value.spec)
                               : g.param(value.name, value.spec, value.init, value.weight_decay, value.sign_rate);
        AxisPlacements& p = placed(id);
        for (int a = 0; a < axes_; ++a) p.push_back(seed(v, a).value_or(Placement::B()));
        out_.value_of[v] = id;
        continue;
      }
      // Nodes go in node order, each once its first output's turn comes
      // (or that of a later node's: a node inserted after the graph was
      // built, a bf16 cast, has its values at the end).
      if (value.output_index != 0) continue;
      while (next_node <= static_cast<size_t>(value.producer)) add_node(static_cast<int>(next_node++));
    }
    while (next_node < graph_.nodes().size()) add_node(static_cast<int>(next_node++));
    for (size_t t = 0; t < request_.targets.size(); ++t)
      if (out_.target_of[t] == kNoValue) {  // an input or parameter named as a target
        const ValueId v = out_.value_of[static_cast<size_t>(request_.targets[t].first)];
        out_.target_of[t] = reshard_to(v, request_.targets[t].second);
      }
    for (const auto& [name, id] : graph_.outputs()) g.mark_output(out_.value_of[static_cast<size_t>(id)], name);
    out_.of_value.resize(g.values().size());
    return std::move(out_);
  }

 private:
  std::optional<Placement> seed(size_t v, int a) const {
    if (v >= request_.seeds.size() || request_.seeds[v].empty()) return std::nullopt;
    return request_.seeds[v][static_cast<size_t>(a)];
  }

  AxisPlacements& placed(ValueId v) {
    if (out_.of_value.size() <= static_cast<size_t>(v)) out_.of_value.resize(static_cast<size_t>(v) + 1);
    return out_.of_value[static_cast<size_t>(v)];
  }

  // Node n of the request's graph, its inputs resharded to the signatures
  // chosen, its outputs to their seeds and targets.
  void add_node(int n) {
    const Node& node = graph_.nodes()[static_cast<size_t>(n)];
    Graph& g = out_.graph;
    std::vector<ValueId> inputs;
    std::vector<TensorSpec> in_specs, out_specs;
    for (ValueId in : node.inputs) {
      inputs.push_back(out_.value_of[static_cast<size_t>(in)]);
      in_specs.push_back(graph_.spec(in));
    }
    for (ValueId o : node.outputs) out_specs.push_back(graph_.spec(o));
    const std::vector<PlacementSignature> offered = node.def->signatures(in_specs, node.attrs);
    std::vector<PlacementSignature> chosen;
    for (int a = 0; a < axes_; ++a) chosen.push_back(choose(node, inputs, in_specs, out_specs, offered, a));

    const int first = static_cast<int>(g.nodes().size());
    out_.node_of[static_cast<size_t>(n)] = first;
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::vector<std::optional<Placement>> want;
      for (int a = 0; a < axes_; ++a) want.push_back(chosen[static_cast<size_t>(a)].inputs[i]);
      inputs[i] = reshard_to(inputs[i], want);
    }
    const std::vector<ValueId> outputs = g.add(node.op(), inputs, node.attrs, node.name);
    for (size_t o = 0; o < outputs.size(); ++o) {
      AxisPlacements& p = placed(outputs[o]);
      for (int a = 0; a < axes_; ++a) p.push_back(chosen[static_cast<size_t>(a)].outputs[o]);
      const size_t old = static_cast<size_t>(node.outputs[o]);
      std::vector<std::optional<Placement>> seeded;
      for (int a = 0; a < axes_; ++a) seeded.push_back(seed(old, a));
      out_.value_of[old] = reshard_to(outputs[o], seeded);
      if (target_index_[old] >= 0)
        out_.target_of[static_cast<size_t>(target_index_[old])] =
            reshard_to(out_.value_of[old], request_.targets[static_cast<size_t>(target_index_[old])].second);
    }
    // The node and its reshards keep its place: forward, or the backward of
    // its origin (which came earlier, so is already mapped).
    if (node.origin >= 0) g.set_origin(first, out_.node_of[static_cast<size_t>(node.origin)]);
  }

  // The node's signature along axis a: among those that fit and take its
  // inputs (parameters where they are stored), one giving output 0 its
  // seed or target if any does, the cheapest resharding, then the least
  // volume.
  PlacementSignature choose(const Node& node, const std::vector<ValueId>& inputs,
                            const std::vector<TensorSpec>& in_specs, const std::vector<TensorSpec>& out_specs,
                            const std::vector<PlacementSignature>& offered, int a) {
    // The expert axis keeps every value whole but for the experts' ops
    // (those offering routed signatures): each rank's rows are its own.
    const bool routed_op = std::any_of(offered.begin(), offered.end(), [](const PlacementSignature& s) { return s.routed; });
    if ((static_cast<size_t>(a) < request_.whole_axes.size() && request_.whole_axes[static_cast<size_t>(a)]) ||
        (a == request_.expert_axis && !routed_op))
      return {"whole", std::vector<Placement>(inputs.size(), Placement::B()),
              std::vector<Placement>(node.outputs.size(), Placement::B())};
    std::vector<Placement> actual;
    for (ValueId in : inputs) actual.push_back(placed(in)[static_cast<size_t>(a)]);
    // What output 0 should be: its seed, or where a gradient is headed.
    const size_t first_out = static_cast<size_t>(node.outputs.front());
    std::optional<Placement> wanted_out = seed(first_out, a);
    if (!wanted_out && target_index_[first_out] >= 0 &&
        static_cast<size_t>(target_index_[first_out]) + request_.quiet_targets < request_.targets.size())
      wanted_out = request_.targets[static_cast<size_t>(target_index_[first_out])].second[static_cast<size_t>(a)];
    struct Candidate {
      PlacementSignature signature;
      int cost = kNever, volume = 0;
      bool seeded = false;
    };
    std::vector<Candidate> candidates;
    for (const PlacementSignature& s : offered) {
      PX_CHECK_EQ(s.inputs.size(), inputs.size());
      if (s.routed && a != request_.expert_axis) continue;
      Candidate c{carry_groups(s, actual, node.def->signatures_see_groups), 0, 0, false};
      if (!fits(c.signature, in_specs, out_specs, mesh_.axes()[static_cast<size_t>(a)].size)) continue;
      for (size_t i = 0; i < inputs.size() && c.cost != kNever; ++i) {
        const Placement& want = c.signature.inputs[i];
        const bool param = graph_.value(node.inputs[i]).kind == Value::Kind::param;
        const std::optional<int> cost = param && want != actual[i] ? std::nullopt : resharding_cost(actual[i], want);
        c.cost = cost ? c.cost + *cost : kNever;
      }
      if (c.cost == kNever) continue;
      for (const Placement& p : c.signature.outputs) c.volume += p.is_split() ? 1 : 2;
      c.seeded = wanted_out && c.signature.outputs.front() == *wanted_out;
      candidates.push_back(std::move(c));
    }
    bool any_seeded = false;
    for (const Candidate& c : candidates) any_seeded = any_seeded || c.seeded;
    const Candidate* best = nullptr;
    for (const Candidate& c : candidates) {
      if (any_seeded && !c.seeded) continue;
      if (best == nullptr || std::tie(c.cost, c.volume) < std::tie(best->cost, best->volume)) best = &c;
    }
    if (best == nullptr) {
      std::string options;
      for (const PlacementSignature& s : offered) options += "\n  " + s.str();
      fail("placement: node '{}' ({}) gets inputs {} along mesh axis '{}' and no signature of the op can take "
           "them (parameters are used where they are stored; nothing makes a partial value); it offers:{}",
           node.name, node.op(), list(actual), mesh_.axes()[static_cast<size_t>(a)].name, options);
    }
    PX_CHECK_EQ(best->signature.outputs.size(), node.outputs.size());
    return best->signature;
  }

  // The rule, one axis at a time; a value resharded the same way twice is resharded once.
  ValueId reshard_one(ValueId v, int axis, const Placement& to) {
    const auto key = std::make_tuple(v, axis, to.str());
    if (auto it = resharded_.find(key); it != resharded_.end()) return it->second;
    Graph& g = out_.graph;
    // One dim cut two ways (a zigzag split and a plain one): gathered whole, then sliced.
    if (const Placement& cut = placed(v)[static_cast<size_t>(axis)]; cut.is_split() && to.is_split() && cut.dim == to.dim)
      return reshard_one(reshard_one(v, axis, Placement::B()), axis, to);
    const AxisPlacements from = placed(v);
    const Placement& was = from[static_cast<size_t>(axis)];
    for (int inner = axis + 1; inner < axes_; ++inner) {
      const Placement& p = from[static_cast<size_t>(inner)];
      if (p.is_split() && ((was.is_split() && was.dim == p.dim) || (to.is_split() && to.dim == p.dim)))
        fail("placement: '{}' is split along dim {} by mesh axes '{}' and '{}'; resharding it along the outer axis "
             "'{}' ({} -> {}) would need the inner split undone first: split different dims on the two axes",
             g.value(v).name, p.dim, mesh_.axes()[static_cast<size_t>(axis)].name,
             mesh_.axes()[static_cast<size_t>(inner)].name, mesh_.axes()[static_cast<size_t>(axis)].name, was.str(),
             to.str());
    }
    const std::string& axis_name = mesh_.axes()[static_cast<size_t>(axis)].name;
    const std::string name = fmt::format("{}.{}_{}", g.value(v).name, axis_name, to.str());
    const bool in_bf16 = sums_in_bf16(v, axis);
    const ValueId term = in_bf16 ? g.add1("to_bf16", {v}, {}, name + ".term") : v;
    if (in_bf16) placed(term) = from;  // each rank's summand, rounded: still P
    const ValueId r = g.add1("reshard", {term},
                             {{"axis", int64_t{axis}},
                              {"from", was.str()},
                              {"to", to.str()},
                              {"shape", g.spec(v).shape.dims()}},
                             name);
    AxisPlacements now = from;
    now[static_cast<size_t>(axis)] = to;
    placed(r) = now;
    const ValueId widened = in_bf16 ? g.add1("to_f32", {r}, {}, name + ".f32") : r;
    if (in_bf16) placed(widened) = now;
    resharded_[key] = widened;
    return widened;
  }

  // Whether the reshard of `v` along `axis` sums it in bf16
  // (PlacementRequest::bf16_sum_axes): an fp32 sum-partial there made by a
  // node that runs in bf16.
  bool sums_in_bf16(ValueId v, int axis) {
    const Graph& g = out_.graph;
    if (static_cast<size_t>(axis) >= request_.bf16_sum_axes.size() || !request_.bf16_sum_axes[static_cast<size_t>(axis)])
      return false;
    const Placement& was = placed(v)[static_cast<size_t>(axis)];
    if (!was.is_partial() || was.reduce != Placement::Reduce::sum || g.spec(v).dtype != DType::f32) return false;
    const int producer = g.value(v).producer;
    return producer >= 0 && precision_of(g.nodes()[static_cast<size_t>(producer)].attrs) == Precision::bf16;
  }

  // Inner axes first: an outer axis' block holds the inner axes' blocks.
  // Slices (B -> S) last and outer axes first: a slice along an inner axis
  // cuts the outer one's block, so both may cut one dim (context
  // parallelism's sequence blocks, sequence parallelism's within them).
  ValueId reshard_to(ValueId v, const std::vector<std::optional<Placement>>& want) {
    auto wanted = [&](int a) -> const Placement* {
      const bool differs = static_cast<size_t>(a) < want.size() && want[static_cast<size_t>(a)] &&
                           *want[static_cast<size_t>(a)] != placed(v)[static_cast<size_t>(a)];
      return differs ? &*want[static_cast<size_t>(a)] : nullptr;
    };
    auto slice = [&](int a) {
      return resharding(placed(v)[static_cast<size_t>(a)], *wanted(a)) == Resharding::slice;
    };
    for (int a = axes_; a-- > 0;)
      if (wanted(a) && !slice(a)) v = reshard_one(v, a, *wanted(a));
    for (int a = 0; a < axes_; ++a)
      if (wanted(a)) v = reshard_one(v, a, *wanted(a));
    return v;
  }

  const PlacementRequest& request_;
  const Graph& graph_;
  const DeviceMesh& mesh_;
  const int axes_;
  Propagation out_;
  std::vector<int> target_index_;  // the request's value id -> its target, or -1
  std::map<std::tuple<ValueId, int, std::string>, ValueId> resharded_;
};

}  // namespace

Propagation propagate(const PlacementRequest& request) {
  PX_CHECK(request.graph != nullptr && request.mesh != nullptr, "propagate: no graph or mesh");
  return Propagator(request).run();
}

}  // namespace px::parallel
