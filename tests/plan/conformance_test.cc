// Conformance: the executor runs a Program the way the simulator replays
// it. For each strategy of the golden Programs (tests/parallel/golden/),
// every rank runs one step in process with tracing and a flight recorder,
// and simulate() replays the same Programs with a FakeEstimator; then
//  - the executor's start/finish times per lane are a valid schedule of the
//    dependence relation the simulator uses: `after` edges, list order on
//    the main thread and on the progress lane, a progress-lane collective
//    no earlier than the main thread reached it, and a collective finishing
//    on no member before every member started it;
//  - instruction by instruction, the simulator puts each collective and
//    reshard on the lane the executor ran it on and meets its group with
//    the sequence number the executor's flight recorder logged;
//  - per mesh axis, the wire bytes the lowering stamped (for the ring) are
//    the bytes the axis' communicator counted, collectives run inline;
//    and so they are for the automatic algorithm, lowered with the run's
//    menus (what each communicator's cost model would choose);
//  - per rank, the peak the memory ledger counts (plan::program_memory,
//    parallel/memory_ledger.h), the replay's, the memory guard's and the
//    executor's measured peak within 5% of each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <ostream>
#include <set>

#include "comm/backends.h"
#include "core/memory.h"
#include "graph/precision.h"
#include "kernels/cpu_features.h"
#include "nn/gpt.h"
#include "parallel/compose.h"
#include "parallel/mesh.h"
#include "parallel/tensor_parallel.h"
#include "parallel/lower/liveness.h"
#include "plan/memory.h"
#include "plan/simulate.h"
#include "runtime/executor/program_executor.h"
#include "runtime/fault/flight_recorder.h"
#include "runtime/fault/memory_guard.h"
#include "runtime/tasks/task.h"

namespace px::plan {
namespace {

// The golden Programs' strategies (tests/parallel/golden_program_test.cc),
// and data parallelism with top-k compression.
struct Case {
  const char* name;
  int ranks;  // data x tensor ranks of one stage
  int zero_stage = 0;
  int micro_batches = 1;
  int layers = 2;
  int tp = 1;
  bool sequence_parallel = false;
  int pp = 1;
  const char* schedule = "1f1b";
  parallel::Recompute recompute = parallel::Recompute::none;
  const char* compress = nullptr;  // a codec, with the ranks' agreement before each compressed collective
  int64_t p3_slice_bytes = 0;      // P3: sliced, prioritized reductions; updates deferred to the next step
  bool bf16 = false;               // mixed precision: bf16 activations, ZeRO-3's bf16 gathers, bf16 transfers
  int cp = 1;                      // context parallelism (`ranks` counts the data x tensor ranks of one chunk)
  bool overlap_model_gradients = false;  // sequence parallelism's LayerNorm gradients on the tp progress lane
  parallel::ContextMethod method = parallel::ContextMethod::ring;
  int ep = 1;                       // expert parallelism over a mixture of 4 experts (of the `ranks`)
  bool overlap_experts = false;     // two micro-batches interleaved, the exchanges on the ep progress lane
};
// Test listings show the case's name, not its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// What one rank's executor did in its step.
struct Observed {
  std::vector<TraceRecord> trace;
  std::vector<FlightEvent> events;
  std::vector<int64_t> axis_bytes;  // what each axis' communicator counted
  int64_t peak_bytes = 0;           // the rank's tensors at most alive during the step
};

// Per instruction: its start and finish (engine slices merged) and its lane.
struct Span {
  double start = 0, finish = 0;
  TraceRecord::Lane lane = TraceRecord::Lane::compute;
};

std::map<int, Span> spans_of(const std::vector<TraceRecord>& trace) {
  std::map<int, Span> spans;
  for (const TraceRecord& r : trace) {
    if (r.instr < 0) continue;
    auto [it, fresh] = spans.try_emplace(r.instr, Span{r.start_us, r.start_us + r.duration_us, r.lane});
    if (fresh) continue;
    it->second.start = std::min(it->second.start, r.start_us);
    it->second.finish = std::max(it->second.finish, r.start_us + r.duration_us);
  }
  return spans;
}

parallel::Strategy strategy_of(const Case& c, const nn::Model& model) {
  parallel::Strategy s = c.tp > 1 ? parallel::tensor_parallel(model.graph, c.ranks / c.tp, c.tp,
                                                              batch_input_names(model), c.sequence_parallel)
                                  : parallel::data_parallel(c.ranks / c.ep, batch_input_names(model));
  s.zero_stage = c.zero_stage;
  s.micro_batches = c.micro_batches;
  s.lowering.bucket_bytes = 4096;
  s.lowering.recompute = c.recompute;
  if (c.compress != nullptr) s.lowering.compression = comm::compression::Spec::parse(c.compress);
  if (c.p3_slice_bytes > 0) {
    s.lowering.p3_slice_bytes = c.p3_slice_bytes;
    s.lowering.global_norm = false;
    s.lowering.bucket_bytes = 0;
  }
  if (c.bf16) s.precision = Precision::bf16;
  if (c.cp > 1) s = parallel::with_context(s, model.graph, c.cp, {.method = c.method});
  if (c.ep > 1) s = parallel::with_experts(s, model.graph, c.ep);
  s.lowering.overlap_expert_exchanges = c.overlap_experts;
  s.lowering.overlap_model_gradients = c.overlap_model_gradients;
  if (c.pp > 1) s = parallel::with_pipeline(s, c.pp, {.schedule = parallel::pipeline_kind_from_name(c.schedule)});
  return s;
}

// The case's GPT: B=4, T=8, C=16 (a mixture of 4 experts, top-2, under
// expert parallelism).
nn::GptConfig config_of(const Case& c) {
  nn::GptConfig config{.vocab = 64, .block = 8, .n_layer = c.layers, .n_head = 2, .n_embd = 16, .dropout = 0.1};
  if (c.ep > 1) {
    config.moe_experts = 4;
    config.moe_top_k = 2;
  }
  return config;
}

// The case's GPT (its precision stamped) and every rank's
// Program, lowered with collectives of `algorithm`.
struct Lowered {
  nn::Model model;
  std::vector<parallel::Program> programs;
};
Lowered lower_case(const Case& c, comm::Algorithm algorithm) {
  const nn::GptConfig config = config_of(c);
  Lowered out{.model = nn::build_gpt(config, 4, config.block, true), .programs = {}};
  out.programs = lower_all(
      {.forward = &out.model.graph, .loss = out.model.loss, .collective = {.algorithm = algorithm}},
      strategy_of(c, out.model));
  return out;
}

// This rank's rows of every batch input, zeros (token 0 is a valid token).
std::vector<std::pair<ValueId, Tensor>> feeds_of(const parallel::Program& p) {
  int64_t rows = 0;
  for (const parallel::MicroBatch& mb : p.micro_batches) rows = std::max(rows, mb.row_begin + mb.rows);
  std::vector<std::pair<ValueId, Tensor>> feeds;
  for (ValueId v : p.batch_inputs) {
    const TensorSpec& spec = p.graphs.front().spec(v);
    std::vector<int64_t> dims = spec.shape.dims();
    dims[0] = rows;
    feeds.emplace_back(v, Tensor::zeros(Shape(dims), spec.dtype));
  }
  return feeds;
}

std::vector<Observed> run_step(const std::vector<parallel::Program>& programs, const ParamStore& params,
                               bool overlap = true) {
  const int world = static_cast<int>(programs.size());
  std::vector<Observed> observed(static_cast<size_t>(world));
  comm::run_inproc(world, [&](comm::Communicator& comm) {
    const MemoryAccountScope account(new_memory_account());  // this rank's tensors
    const parallel::Program& program = programs[static_cast<size_t>(comm.rank())];
    parallel::MeshGroups mesh = parallel::make_strategy_groups(comm, program.strategy);
    const AxisGroups groups = axis_groups(mesh);
    FlightRecorder recorder("", comm.rank(), world);
    ProgramExecutor executor(program, groups, {}, {.overlap = overlap, .trace = true});
    executor.set_parameters(params);
    executor.set_flight_recorder(&recorder);
    executor.set_tracing(true);
    const StepResult result = executor.run({.feeds = feeds_of(program), .seed = 1, .step = 0, .lr = 1e-3});
    executor.finish();
    Observed& mine = observed[static_cast<size_t>(comm.rank())];
    mine.axis_bytes = result.axis_bytes;
    mine.peak_bytes = result.peak_bytes;
    mine.trace = executor.take_trace();
    mine.events = recorder.read().events;
  });
  return observed;
}

// The main thread keeps list order; the progress lane runs one slice at a
// time, and a job no earlier than those before it in the list that are at
// least as urgent (Instr::priority: P3's overtake less urgent ones); `after`
// edges hold; a progress-lane collective starts no earlier than the main
// thread reached it.
void expect_valid_schedule(const parallel::Program& p, const std::map<int, Span>& spans,
                           const std::vector<TraceRecord>& trace, const std::string& where) {
  const Span* main = nullptr;
  int main_id = -1;
  std::vector<int> progress;  // ids so far
  for (const auto& [id, span] : spans) {
    const parallel::Instr& instr = p.instrs[static_cast<size_t>(id)];
    for (int dep : instr.after) {
      auto it = spans.find(dep);
      if (it == spans.end() || instr.deferred) continue;  // a deferred one waits for the previous step's
      EXPECT_LE(it->second.finish, span.start) << where << ": #" << id << " started before #" << dep << " finished";
    }
    if (span.lane != TraceRecord::Lane::progress) {
      if (main != nullptr) {
        EXPECT_LE(main->finish, span.start) << where << ": #" << id << " ran beside #" << main_id << " on its lane";
      }
      main = &span;
      main_id = id;
      continue;
    }
    for (int before : progress)
      if (p.instrs[static_cast<size_t>(before)].priority <= instr.priority) {
        EXPECT_LE(spans.at(before).finish, span.start) << where << ": #" << id << " overtook #" << before;
      }
    progress.push_back(id);
    if (main != nullptr) {
      EXPECT_LE(main->finish, span.start) << where << ": #" << id << " ran before the main thread reached it";
    }
  }
  std::vector<std::pair<double, double>> slices;
  for (const TraceRecord& r : trace)
    if (r.lane == TraceRecord::Lane::progress) slices.push_back({r.start_us, r.start_us + r.duration_us});
  std::sort(slices.begin(), slices.end());
  for (size_t k = 1; k < slices.size(); ++k)
    EXPECT_LE(slices[k - 1].second, slices[k].first) << where << ": two progress-lane slices at once";
}

class Conformance : public ::testing::TestWithParam<Case> {};

TEST_P(Conformance, ExecutorRunsTheProgramAsTheSimulatorReplaysIt) {
  const Case& c = GetParam();
  if (c.bf16 && !kernels::cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16";
  // The ring, whose bytes the stamped wire must be to the byte.
  const Lowered lowered = lower_case(c, comm::Algorithm::ring);
  const nn::Model& model = lowered.model;
  const std::vector<parallel::Program>& programs = lowered.programs;
  const std::vector<Observed> observed = run_step(programs, ParamStore::initialize(model.graph, 7));

  FakeEstimator fake;
  fake.per_node = 1e-6;
  fake.per_byte = 1e-10;
  fake.alpha = 1e-6;
  fake.beta = 1e-9;
  const ClusterSpec cluster = cluster_named("dgx-a100");
  const Simulation sim = simulate({.programs = &programs, .cluster = &cluster, .estimator = &fake,
                                       .execution = {.trace = true}});

  // Every (group, sequence) call: its members' starts and finishes.
  std::map<std::pair<std::string, int64_t>, std::pair<double, double>> calls;  // -> (latest start, earliest finish)
  for (size_t r = 0; r < programs.size(); ++r) {
    const parallel::Program& p = programs[r];
    const std::string where = fmt::format("{} rank {}", c.name, r);
    const std::map<int, Span> spans = spans_of(observed[r].trace);
    expect_valid_schedule(p, spans, observed[r].trace, where);
    std::map<int, int64_t> logged;  // instruction -> the flight recorder's sequence number
    for (const FlightEvent& e : observed[r].events)
      if (e.kind == FlightKind::collective || e.kind == FlightKind::reshard) logged[e.instr] = static_cast<int64_t>(e.sequence);
    std::set<int> compared;  // instructions (a sliced job has an event a slice)
    for (const SimulatedEvent& e : sim.trace) {
      if (e.rank != p.rank || e.sequence < 0) continue;
      auto span = spans.find(e.instr);
      ASSERT_NE(span, spans.end()) << where << ": the executor left no record of " << p.str(static_cast<size_t>(e.instr));
      const bool on_progress = span->second.lane == TraceRecord::Lane::progress;
      EXPECT_EQ(e.lane.starts_with("progress:"), on_progress)
          << where << ": simulated on " << e.lane << ", executed " << (on_progress ? "on the progress lane" : "inline")
          << ": " << p.str(static_cast<size_t>(e.instr));
      ASSERT_TRUE(logged.count(e.instr)) << where << ": no flight event for " << p.str(static_cast<size_t>(e.instr));
      EXPECT_EQ(logged[e.instr], e.sequence) << where << ": " << p.str(static_cast<size_t>(e.instr));
      const std::string& key = p.groups[static_cast<size_t>(p.instrs[static_cast<size_t>(e.instr)].group)].key;
      auto [it, fresh] = calls.try_emplace({key, e.sequence}, span->second.start, span->second.finish);
      if (!fresh) {
        it->second.first = std::max(it->second.first, span->second.start);
        it->second.second = std::min(it->second.second, span->second.finish);
      }
      compared.insert(e.instr);
    }
    EXPECT_EQ(compared.size(), logged.size()) << where << ": the simulator met other calls than were run";

  }
  // Wire bytes: what the lowering stamped is what each axis' communicator
  // counted, run inline (the progress engine adds its own agreement on
  // which jobs every rank submitted; subgroups run on communicators of
  // their own; a transfer counts on its axis). A codec's payload is a
  // model of its data; so is a Route's, whose stamp is a balanced
  // routing's (these zero tokens all go to the same two experts): the
  // expert axis is left out.
  if (c.compress == nullptr) {
    const std::vector<Observed> inline_run = run_step(programs, ParamStore::initialize(model.graph, 7), false);
    for (size_t r = 0; r < programs.size(); ++r) {
      const parallel::Program& p = programs[r];
      std::vector<int64_t> stamped(p.strategy.mesh.axes().size(), 0);
      for (const parallel::Instr& instr : p.instrs) {
        if (instr.group >= 0 && p.groups[static_cast<size_t>(instr.group)].subgroup < 0)
          stamped[static_cast<size_t>(p.groups[static_cast<size_t>(instr.group)].axis)] += instr.wire.total();
        if (const auto* send = std::get_if<parallel::Send>(&instr.op))
          stamped[static_cast<size_t>(send->axis)] += instr.wire.total();
      }
      for (size_t a = 0; a < stamped.size(); ++a)
        if (p.strategy.mesh.axes()[a].name != parallel::kExpertAxis)
          EXPECT_EQ(stamped[a], inline_run[r].axis_bytes[a])
              << c.name << " rank " << r << ": bytes on axis " << p.strategy.mesh.axes()[a].name;
    }
  }
  for (const auto& [call, times] : calls)
    EXPECT_LE(times.first, times.second) << c.name << ": group " << call.first << " call " << call.second
                                         << " finished on a member before another started it";
}

// One memory ledger: the peak plan::program_memory counts for a rank's
// Program, the replay's, the memory guard's (what it holds against the
// machine) and the executor's measured peak of tensor bytes in its step,
// its collectives inline, within 5% (AdamW's two slots: the executor's
// default optimizer). Overlapped, what a job still reads (a freed bucket,
// a gather's staged input) lives until the job is done, which timing
// decides: the measured peak lies between the ledger's peak and its held
// peak (every job holding until the main thread waits for it).
TEST_P(Conformance, LedgerReplayGuardAndExecutorAgreeOnThePeak) {
  const Case& c = GetParam();
  if (c.bf16 && !kernels::cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16";
  const Lowered lowered = lower_case(c, comm::Algorithm::automatic);
  const std::vector<parallel::Program>& programs = lowered.programs;
  const ParamStore params = ParamStore::initialize(lowered.model.graph, 7);
  const std::vector<Observed> inline_run = run_step(programs, params, false);
  const std::vector<Observed> overlapped = run_step(programs, params, true);
  FakeEstimator fake;
  fake.per_node = 1e-6;
  fake.alpha = 1e-6;
  fake.beta = 1e-9;
  const ClusterSpec cluster = cluster_named("dgx-a100");
  const Simulation sim = simulate({.programs = &programs, .cluster = &cluster, .estimator = &fake, .optimizer_slots = 2});
  for (size_t r = 0; r < programs.size(); ++r) {
    const parallel::Program& p = programs[r];
    const double measured = static_cast<double>(inline_run[r].peak_bytes);
    const ProgramMemory ledger = program_memory(p, parallel::liveness(p), 2);
    const double guard = program_peak_bytes(p, 2);
    const std::string where =
        fmt::format("{} rank {}: ledger {:.0f} (held {:.0f}), replay {:.0f}, guard {:.0f}, executor {} inline, {} "
                    "overlapped",
                    c.name, r, ledger.peak_bytes, ledger.held_peak_bytes, sim.peak_bytes[r], guard,
                    inline_run[r].peak_bytes, overlapped[r].peak_bytes);
    ASSERT_GT(measured, 0) << where;
    EXPECT_NEAR(ledger.peak_bytes / measured, 1.0, 0.05) << where;
    EXPECT_NEAR(sim.peak_bytes[r] / measured, 1.0, 0.05) << where;
    EXPECT_NEAR(guard / measured, 1.0, 0.05) << where;
    EXPECT_GE(static_cast<double>(overlapped[r].peak_bytes), 0.95 * ledger.peak_bytes) << where;
    EXPECT_LE(static_cast<double>(overlapped[r].peak_bytes), 1.05 * ledger.held_peak_bytes) << where;
  }
}

// Lowered inside the run with each axis' menu, automatic is stamped as the
// algorithm the communicator will run, and its bytes are counted.
TEST_P(Conformance, AutomaticIsStampedAsTheAlgorithmThatRuns) {
  const Case& c = GetParam();
  if (c.compress != nullptr) GTEST_SKIP() << "a codec's payload is a model of its data";
  const nn::GptConfig config = config_of(c);
  if (c.bf16 && !kernels::cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16";
  nn::Model model = nn::build_gpt(config, 4, config.block, true);
  const parallel::Strategy strategy = strategy_of(c, model);
  const ParamStore params = ParamStore::initialize(model.graph, 7);
  const int world = strategy.mesh.ranks();
  std::mutex mutex;
  std::set<std::string> algorithms;
  comm::run_inproc(world, [&](comm::Communicator& comm) {
    parallel::MeshGroups mesh = parallel::make_strategy_groups(comm, strategy);
    const AxisGroups groups = axis_groups(mesh);
    const std::vector<comm::AlgorithmMenu> menus = parallel::algorithm_menus(mesh);
    const parallel::Program program =
        parallel::lower({.forward = &model.graph, .loss = model.loss, .menus = menus}, strategy, comm.rank());
    ProgramExecutor executor(program, groups, {}, {.overlap = false});
    executor.set_parameters(params);
    const StepResult result = executor.run({.feeds = feeds_of(program), .seed = 1, .step = 0, .lr = 1e-3});
    executor.finish();
    std::vector<int64_t> stamped(program.strategy.mesh.axes().size(), 0);
    std::set<std::string> mine;
    for (const parallel::Instr& instr : program.instrs) {
      if (const auto* send = std::get_if<parallel::Send>(&instr.op))
        stamped[static_cast<size_t>(send->axis)] += instr.wire.total();
      if (instr.group < 0 || program.groups[static_cast<size_t>(instr.group)].subgroup >= 0) continue;
      if (std::holds_alternative<parallel::Route>(instr.op)) continue;  // a pairwise all-to-all-v: no menu, bytes routed
      stamped[static_cast<size_t>(program.groups[static_cast<size_t>(instr.group)].axis)] += instr.wire.total();
      EXPECT_NE(instr.algorithm, comm::Algorithm::automatic) << c.name << ": " << program.str(&instr - program.instrs.data());
      mine.insert(std::string(comm::algorithm_name(instr.algorithm)));
    }
    for (size_t a = 0; a < stamped.size(); ++a)
      if (program.strategy.mesh.axes()[a].name != parallel::kExpertAxis)
        EXPECT_EQ(stamped[a], result.axis_bytes[a]) << c.name << " rank " << comm.rank() << ": bytes on axis "
                                                  << program.strategy.mesh.axes()[a].name;
    std::lock_guard lock(mutex);
    algorithms.insert(mine.begin(), mine.end());
  });
  if (world > 1) {
    EXPECT_FALSE(algorithms.empty()) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    GoldenStrategies, Conformance,
    ::testing::Values(Case{.name = "gpt2l_1rank", .ranks = 1}, Case{.name = "gpt2l_dp2", .ranks = 2},
                      Case{.name = "gpt2l_zero1", .ranks = 2, .zero_stage = 1, .micro_batches = 2},
                      Case{.name = "gpt2l_zero2", .ranks = 2, .zero_stage = 2, .micro_batches = 2},
                      Case{.name = "gpt2l_zero3", .ranks = 2, .zero_stage = 3, .micro_batches = 2},
                      Case{.name = "gpt1l_tp2", .ranks = 2, .layers = 1, .tp = 2},
                      Case{.name = "gpt1l_tp2_sp", .ranks = 2, .layers = 1, .tp = 2, .sequence_parallel = true},
                      Case{.name = "gpt1l_dp2_tp2_zero1", .ranks = 4, .zero_stage = 1, .layers = 1, .tp = 2},
                      Case{.name = "gpt2l_pp2_1f1b", .ranks = 1, .micro_batches = 2, .pp = 2},
                      Case{.name = "gpt2l_pp2_zbh1", .ranks = 1, .micro_batches = 2, .pp = 2, .schedule = "zb-h1"},
                      Case{.name = "gpt2l_recompute_full", .ranks = 1, .recompute = parallel::Recompute::full},
                      Case{.name = "gpt2l_dp2_topk", .ranks = 2, .compress = "topk:0.1"},
                      Case{.name = "gpt2l_dp2_p3", .ranks = 2, .p3_slice_bytes = 1024},
                      Case{.name = "gpt2l_zero3_bf16", .ranks = 2, .zero_stage = 3, .micro_batches = 2, .bf16 = true},
                      Case{.name = "gpt2l_pp2_1f1b_bf16", .ranks = 1, .micro_batches = 2, .pp = 2, .bf16 = true},
                      Case{.name = "gpt1l_cp2_ring", .ranks = 1, .layers = 1, .cp = 2},
                      Case{.name = "gpt1l_cp2_alltoall", .ranks = 1, .layers = 1, .cp = 2,
                           .method = parallel::ContextMethod::all_to_all},
                      Case{.name = "gpt1l_dp2_cp2_zero1", .ranks = 2, .zero_stage = 1, .layers = 1, .cp = 2},
                      Case{.name = "gpt1l_tp2_sp_overlapped", .ranks = 2, .layers = 1, .tp = 2,
                           .sequence_parallel = true, .overlap_model_gradients = true},
                      Case{.name = "gpt1l_ep2_overlapped", .ranks = 2, .micro_batches = 2, .layers = 1, .ep = 2,
                           .overlap_experts = true}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace px::plan
