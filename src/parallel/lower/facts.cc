// facts: how every instruction runs, stamped once (program.h's table), so
// the executor, the simulator and the flight recorder read one answer.
//
// Lanes: the data axis' collectives (gradient buckets, ZeRO gathers, the
// loss, a sharded norm) go on the data axis' progress lane: they overlap
// compute, which is what data parallelism's buckets are for. Every other
// collective (a model axis', the pipeline's loss, a subgroup's sum) and
// every reshard block the main thread where they stand: the value is
// needed next. So does a Route, unless the schedule interleaved two
// micro-batches around it (Route::overlapped): then it is a job of the
// expert axis' progress lane. Sends and receives are the pipeline axis'
// p2p lane.
//
// Groups and sequence numbers: a collective or reshard that moves data
// names its group (the ranks differing from this one only along its axis,
// or a subgroup of them) and counts its place among this step's calls on
// that group, in list order: every member lists the group's calls in the
// same order (collectives.h's contract), so (group key, sequence) names one
// call on every rank.
//
// Algorithm and wire bytes: Program::collective's algorithm, automatic
// resolved by the run's menus (what the communicator would choose for the
// collective's size; hierarchical's nodes the hosts); comm::wire_bytes for
// it, the instruction's codec, this rank's place in its group and where
// the group's ranks sit (the menu's hosts: the bytes between hosts apart);
// a send's value, in the dtype it travels in, between hosts when the peer
// is on another.
#include <algorithm>
#include <map>

#include "core/error.h"
#include "parallel/lower/passes.h"

namespace px::parallel::passes {
namespace {

// `joined_axis` >= 0: the group spans that axis too (the data path under
// context or expert parallelism), ordered as parallel::make_mesh_groups
// orders it.
int group_of(Program& p, int axis, int subgroup, int joined_axis = -1) {
  for (size_t g = 0; g < p.groups.size(); ++g)
    if (p.groups[g].axis == axis && p.groups[g].subgroup == subgroup && p.groups[g].joined_axis == joined_axis)
      return static_cast<int>(g);
  const DeviceMesh& mesh = p.strategy.mesh;
  CommGroup group{.axis = axis, .subgroup = subgroup, .joined_axis = joined_axis};
  std::vector<int> along;
  if (subgroup >= 0) along = p.subgroups.at(static_cast<size_t>(subgroup)).coords;
  else
    for (int c = 0; c < mesh.axes()[static_cast<size_t>(axis)].size; ++c) along.push_back(c);
  const int joined_size = joined_axis >= 0 ? mesh.axes()[static_cast<size_t>(joined_axis)].size : 1;
  std::vector<int> coords = p.coords;
  for (int c : along) {
    coords[static_cast<size_t>(axis)] = c;
    for (int k = 0; k < joined_size; ++k) {
      if (joined_axis >= 0) coords[static_cast<size_t>(joined_axis)] = k;
      if (coords == p.coords) group.rank = static_cast<int>(group.ranks.size());
      group.ranks.push_back(mesh.rank_of(coords));
    }
  }
  coords[static_cast<size_t>(axis)] = -1;
  if (joined_axis >= 0) coords[static_cast<size_t>(joined_axis)] = -1;
  group.key = joined_axis >= 0 ? fmt::format("{}+{}/{}/{}", axis, joined_axis, subgroup, fmt::join(coords, ","))
                                : fmt::format("{}/{}/{}", axis, subgroup, fmt::join(coords, ","));
  p.groups.push_back(std::move(group));
  return static_cast<int>(p.groups.size() - 1);
}

// Resolves automatic where the run's menu is known: the algorithm a
// collective of `bytes` over `group` will run, and the options its wire
// bytes are counted under (hierarchical's node size the hosts').
struct Resolved {
  comm::Algorithm algorithm = comm::Algorithm::automatic;
  comm::CollectiveOptions wire;
  bool node_shared_memory = true;
  std::vector<int> hosts;  // each group rank's host (empty: not known)
};

// The run's menu for `group` (its axis', or the data x context group's), or null.
const comm::AlgorithmMenu* menu_of(const Program& p, const std::vector<comm::AlgorithmMenu>& menus,
                                   const CommGroup& group) {
  const size_t slot = group.joined_axis >= 0 ? p.strategy.mesh.axes().size() : static_cast<size_t>(group.axis);
  return slot < menus.size() ? &menus[slot] : nullptr;
}

// Each group rank's host, from the menu's (by coordinate along the axis).
std::vector<int> hosts_of(const Program& p, const comm::AlgorithmMenu& menu, const CommGroup& group) {
  if (menu.hosts.empty()) return {};
  if (group.subgroup < 0) return menu.hosts;
  std::vector<int> hosts;
  for (int c : p.subgroups.at(static_cast<size_t>(group.subgroup)).coords) hosts.push_back(menu.hosts.at(static_cast<size_t>(c)));
  return hosts;
}
Resolved resolve(const Program& p, const std::vector<comm::AlgorithmMenu>& menus, const CommGroup& group,
                 comm::Collective kind, int64_t bytes) {
  const comm::CollectiveOptions run = comm::options_for(p.collective, kind);
  Resolved r{.wire = run};
  const int ranks = static_cast<int>(group.ranks.size());
  if (menus.empty() || ranks <= 1) return r;
  // The data x context group's menu follows the axes' (LowerRequest::menus).
  const comm::AlgorithmMenu* found = menu_of(p, menus, group);
  if (found == nullptr) return r;
  const comm::AlgorithmMenu& menu = *found;
  r.hosts = hosts_of(p, menu, group);
  r.algorithm = comm::choose_algorithm(menu, kind, static_cast<double>(bytes), ranks, run);
  r.wire.algorithm = r.algorithm;
  r.node_shared_memory = menu.node_shared_memory;
  return r;
}

// A collective's algorithm (a compressed one runs its codec's exchange) and wire bytes.
void stamp_collective(const Program& p, const std::vector<comm::AlgorithmMenu>& menus, const Collective& c,
                      Instr& instr) {
  const CommGroup& group = p.groups[static_cast<size_t>(instr.group)];
  const Region& whole = c.kind == comm::Collective::allgather ? c.output : c.input;
  const int64_t bytes = p.bytes(whole);  // a bf16 bucket's gather: half a float32 one's
  Resolved r = c.codec.lossy() ? Resolved{.wire = p.collective} : resolve(p, menus, group, c.kind, bytes);
  if (const comm::AlgorithmMenu* menu = menu_of(p, menus, group); c.codec.lossy() && menu != nullptr)
    r.hosts = hosts_of(p, *menu, group);
  instr.algorithm = r.algorithm;
  instr.wire = comm::wire_bytes({.collective = c.kind,
                                 .options = r.wire,
                                 .bytes = bytes,
                                 .element_bytes = static_cast<int>(dtype_size(p.buffers[static_cast<size_t>(whole.buffer)].dtype)),
                                 .ranks = static_cast<int>(group.ranks.size()),
                                 .rank = group.rank,
                                 .hosts = r.hosts,
                                 .node_shared_memory = r.node_shared_memory,
                                 .codec = c.codec,
                                 .codec_rows = c.codec_rows,
                                 .codec_cols = c.codec_cols});
}

// A reshard's collective moves the value whole on one side (the larger).
void stamp_reshard(const Program& p, const std::vector<comm::AlgorithmMenu>& menus, const Reshard& reshard,
                   comm::Collective kind, Instr& instr) {
  const CommGroup& group = p.groups[static_cast<size_t>(instr.group)];
  const Graph& g = p.graph_of(instr.micro_batch);
  const Node& node = g.nodes()[static_cast<size_t>(reshard.node)];
  const int64_t bytes = std::max(static_cast<int64_t>(g.spec(node.inputs.front()).bytes()),
                                 static_cast<int64_t>(g.spec(node.outputs.front()).bytes()));
  const Resolved r = resolve(p, menus, group, kind, bytes);
  instr.algorithm = r.algorithm;
  instr.wire = comm::wire_bytes({.collective = kind, .options = r.wire, .bytes = bytes,
                                 .ranks = static_cast<int>(group.ranks.size()), .rank = group.rank,
                                 .hosts = r.hosts, .node_shared_memory = r.node_shared_memory});
}

// A routed exchange as the all-to-all of the rows a balanced routing
// moves (the input's spec); the counts' allgather before it is small.
void stamp_route(const Program& p, const std::vector<comm::AlgorithmMenu>& menus, const Route& route, Instr& instr) {
  const CommGroup& group = p.groups[static_cast<size_t>(instr.group)];
  const Graph& g = p.graph_of(instr.micro_batch);
  const Node& node = g.nodes()[static_cast<size_t>(route.node)];
  const auto bytes = static_cast<int64_t>(g.spec(node.inputs.front()).bytes());
  const Resolved r = resolve(p, menus, group, comm::Collective::all_to_all, bytes);
  instr.wire = comm::wire_bytes({.collective = comm::Collective::all_to_all, .options = r.wire, .bytes = bytes,
                                 .ranks = static_cast<int>(group.ranks.size()), .rank = group.rank,
                                 .hosts = r.hosts, .node_shared_memory = r.node_shared_memory});
}

// How the rank's engine runs a progress-lane collective: plain float32
// allreduces, reduce-scatters and gathers as the engine's own jobs, cut
// into slices of the collective's slice_bytes (comm::slice_plan, the
// engine's rule); a codec's exchange (every gradient collective of a
// compressed run), a reduce-scatter that adds into its shard and a gather
// into a bf16 bucket as custom jobs, run whole; each slice after one
// agreement round of the engine's (comm::announcement_rounds).
void stamp_engine_job(const Context& c, const Program& p, const Collective& collective, Instr& instr) {
  const Region& whole = collective.kind == comm::Collective::allgather ? collective.output : collective.input;
  const Buffer& input = p.buffers[static_cast<size_t>(collective.input.buffer)];
  const bool codec = c.strategy.lowering.compression.lossy() && input.kind == Buffer::Kind::grad_bucket;
  const bool f32 = p.buffers[static_cast<size_t>(whole.buffer)].dtype == DType::f32;
  instr.job = comm::JobKind::custom;
  if (!codec && !collective.accumulate && f32) {
    if (collective.kind == comm::Collective::allreduce) instr.job = comm::JobKind::allreduce;
    if (collective.kind == comm::Collective::reduce_scatter) instr.job = comm::JobKind::reduce_scatter;
    if (collective.kind == comm::Collective::allgather) instr.job = comm::JobKind::allgather;
  }
  const auto ranks = static_cast<int>(p.groups[static_cast<size_t>(instr.group)].ranks.size());
  const comm::SlicePlan plan = instr.job == comm::JobKind::custom
                                  ? comm::SlicePlan{}
                                  : comm::slice_plan(instr.job, whole.count, collective.slice_bytes, ranks);
  instr.slices = plan.slices;
  instr.announcement_rounds = comm::announcement_rounds(plan);
}

// A message to `peer` along `axis` leaves this rank's host (the run's menu
// of the axis knows; without one, it does not).
bool crosses_hosts(const Program& p, const std::vector<comm::AlgorithmMenu>& menus, int axis, int peer) {
  if (static_cast<size_t>(axis) >= menus.size()) return false;
  const std::vector<int>& hosts = menus[static_cast<size_t>(axis)].hosts;
  if (hosts.empty()) return false;
  return hosts.at(static_cast<size_t>(peer)) != hosts.at(static_cast<size_t>(p.coords[static_cast<size_t>(axis)]));
}

}  // namespace

void facts(const Context& c, Program& p, const std::vector<comm::AlgorithmMenu>& menus) {
  std::map<int, int64_t> calls;  // group -> calls stamped so far
  for (Instr& instr : p.instrs) {
    instr.lane = {};
    if (const auto* collective = std::get_if<Collective>(&instr.op)) {
      // The data path runs over data x context or data x expert ranks
      // (parallel::joined_axis); the expert weights' gradients over the
      // data axis alone, the expert-data group.
      const bool data_path = collective->axis == c.data_axis && collective->subgroup < 0;
      instr.group = group_of(p, collective->axis, collective->subgroup,
                             data_path && !collective->expert_data ? c.joined_axis : -1);
      if (data_path && c.data_size > 1 && !collective->expert_data)
        instr.lane = {.kind = Lane::Kind::progress, .axis = c.data_axis};
      // A partial gradient's reduction over a model axis (Strategy::lowering.overlap_model_gradients).
      const bool model_gradient = !data_path && collective->subgroup < 0 &&
                                  p.buffers[static_cast<size_t>(collective->input.buffer)].kind == Buffer::Kind::grad_bucket;
      if (model_gradient && c.strategy.lowering.overlap_model_gradients &&
          c.strategy.mesh.axes()[static_cast<size_t>(collective->axis)].size > 1)
        instr.lane = {.kind = Lane::Kind::progress, .axis = collective->axis};
      stamp_collective(p, menus, *collective, instr);
      if (instr.lane.kind == Lane::Kind::progress) stamp_engine_job(c, p, *collective, instr);
    } else if (const auto* reshard = std::get_if<Reshard>(&instr.op)) {
      const std::optional<comm::Collective> kind = collective_of(resharding(reshard->from, reshard->to));
      if (!kind) continue;  // a slice: local
      // Under expert parallelism the data axis' rows are split over data x
      // expert ranks: a batch value moves over that group.
      const bool rows_joined = reshard->axis == c.data_axis && c.expert_axis >= 0;
      instr.group = group_of(p, reshard->axis, -1, rows_joined ? c.joined_axis : -1);
      stamp_reshard(p, menus, *reshard, *kind, instr);
    } else if (const auto* route = std::get_if<Route>(&instr.op)) {
      instr.group = group_of(p, route->axis, -1);
      stamp_route(p, menus, *route, instr);
      if (route->overlapped) {  // a custom job of the expert axis' engine, run whole
        instr.lane = {.kind = Lane::Kind::progress, .axis = route->axis};
        instr.job = comm::JobKind::custom;
        instr.slices = comm::SlicePlan{}.slices;
        instr.announcement_rounds = comm::announcement_rounds(comm::SlicePlan{});
      }
    } else if (const auto* send = std::get_if<Send>(&instr.op)) {
      instr.lane = {.kind = Lane::Kind::p2p, .axis = send->axis};
      const int64_t bytes =
          p.graph_of(instr.micro_batch).spec(send->value).shape.numel() * static_cast<int64_t>(dtype_size(send->dtype));
      (crosses_hosts(p, menus, send->axis, send->peer) ? instr.wire.inter_node : instr.wire.intra_node) = bytes;
    } else if (const auto* recv = std::get_if<Recv>(&instr.op)) {
      instr.lane = {.kind = Lane::Kind::p2p, .axis = recv->axis};
      const int64_t bytes =
          p.graph_of(instr.micro_batch).spec(recv->value).shape.numel() * static_cast<int64_t>(dtype_size(recv->dtype));
      (crosses_hosts(p, menus, recv->axis, recv->peer) ? instr.wire.inter_node : instr.wire.intra_node) = bytes;
    }
    if (instr.group >= 0) instr.sequence = calls[instr.group]++;
  }
}

}  // namespace px::parallel::passes
