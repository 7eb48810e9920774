#include "runtime/calibrate/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include <unistd.h>

#include "comm/backends.h"
#include "comm/collectives.h"
#include "comm/compression/compressor.h"
#include "core/error.h"
#include "core/rng.h"
#include "graph/op.h"
#include "kernels/bf16.h"
#include "kernels/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/threads.h"

namespace px {
using plan::HostProfile;
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Per-call seconds of one batch of calls of `run` lasting at least batch_seconds.
double time_batch(const std::function<void()>& run, double batch_seconds) {
  const double start = now_seconds();
  int calls = 0;
  double elapsed = 0;
  do {
    run();
    ++calls;
    elapsed = now_seconds() - start;
  } while (elapsed < batch_seconds);
  return elapsed / calls;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Per-call seconds of `run`: batches of calls lasting at least batch_seconds, the median batch.
double time_calls(const std::function<void()>& run, const CalibrationOptions& options) {
  run();  // warm: first-touch pages, caches, pools
  std::vector<double> per_call;
  for (int b = 0; b < std::max(1, options.batches); ++b) per_call.push_back(time_batch(run, options.batch_seconds));
  return median(std::move(per_call));
}

// One rank's compute-bound and memory-bound work, on its own buffers.
constexpr int64_t kGemm = 384;                // a square GEMM's side
constexpr int64_t kStream = 4 << 20;          // floats per streamed array (16 MiB, past the cache)
struct Work {
  std::vector<float> a, b, c;
  explicit Work(int64_t n) : a(static_cast<size_t>(n), 1.0f), b(static_cast<size_t>(n), 0.5f), c(static_cast<size_t>(n)) {}
  void gemm() { kernels::gemm(false, false, kGemm, kGemm, kGemm, 1, a.data(), kGemm, b.data(), kGemm, 0, c.data(), kGemm); }
  // Not instrumented under AddressSanitizer: the probe measures the
  // host's memory, not the sanitizer's checks (which made every
  // uncalibrated prediction of the sanitized suite seconds longer).
  void stream() { add(a.data(), b.data(), c.data(), c.size()); }
  // Raw pointers: a function left uninstrumented cannot inline the
  // vector's (instrumented) accessors.
  __attribute__((no_sanitize("address"))) static void add(const float* x, const float* y, float* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
  }
};
constexpr double kGemmFlops = 2.0 * kGemm * kGemm * kGemm;
constexpr double kStreamBytes = 3.0 * kStream * sizeof(float);

// Seconds per call of each thread's work when k threads run it at once
// (the slowest thread's mean). The threads' buffers are made once by the
// caller: a fresh 48 MiB per thread and round cost more than the probe
// itself (zero-filled pages faulted in, 2.5 s of a 3 s probe).
double concurrent_seconds(std::vector<Work>& works, int k, bool memory, int calls) {
  std::vector<double> seconds(static_cast<size_t>(k));
  std::vector<std::thread> threads;
  for (int t = 0; t < k; ++t)
    threads.emplace_back([&, t] {
      Work& w = works[static_cast<size_t>(t)];  // its pages already touched: filled when made
      const double start = now_seconds();
      for (int i = 0; i < calls; ++i) memory ? w.stream() : w.gemm();
      seconds[static_cast<size_t>(t)] = (now_seconds() - start) / calls;
    });
  for (std::thread& t : threads) t.join();
  return *std::max_element(seconds.begin(), seconds.end());
}

void fill(Tensor& t, Rng& rng) {
  if (t.dtype() == DType::f32) {
    for (float& x : t.span<float>()) x = static_cast<float>(0.5 + rng.uniform());  // positive: logs and roots
  } else {
    std::memset(t.raw(), 0, t.nbytes());  // index 0 is valid for every index input
  }
}

// A compressed allreduce of kCodecElements floats on `ranks` in-process
// ranks at once, one kernel thread each: seconds per call, the slowest
// rank's mean over `calls`. Each call starts from the rank's own gradient
// again (the sum replaces it): one copy, small beside the codec.
constexpr int64_t kCodecElements = int64_t{1} << 18;
double compressed_allreduce_seconds(const comm::compression::Spec& spec, int ranks, int calls) {
  std::vector<double> seconds(static_cast<size_t>(ranks));
  comm::run_inproc(ranks, [&](comm::Communicator& comm) {
    comm::compression::GradientCompressor codec(spec, kCodecElements, 1);
    Rng rng(static_cast<uint64_t>(comm.rank()) + 1);
    std::vector<float> mine(static_cast<size_t>(kCodecElements)), grad(mine.size());
    for (float& g : mine) g = static_cast<float>(1e-3 * rng.normal());
    auto call = [&](uint64_t step) {
      std::copy(mine.begin(), mine.end(), grad.begin());
      codec.allreduce_sum(comm, grad, step);
    };
    call(0);  // warm: the ranks' agreement on the codec, first-touch pages
    comm::barrier(comm);
    const double start = now_seconds();
    for (int i = 1; i <= calls; ++i) call(static_cast<uint64_t>(i));
    seconds[static_cast<size_t>(comm.rank())] = (now_seconds() - start) / calls;
  });
  return *std::max_element(seconds.begin(), seconds.end());
}

}  // namespace

void measure_codecs(HostProfile& profile, const CalibrationOptions& options, const CalibrationProgress& progress) {
  using comm::compression::Method;
  const int threads = kernels::threads();
  kernels::set_threads(1);  // a rank's progress thread runs the codec on its own
  for (Method method : {Method::fp16, Method::bf16, Method::int8, Method::sign, Method::topk, Method::threshold}) {
    const comm::compression::Spec spec{.method = method};
    // One rank encodes and decodes its own payload; two at once decode
    // two each (and exchange them, an in-process copy): the difference is
    // one payload's decode. Median of the rounds.
    const double once = compressed_allreduce_seconds(spec, 1, 1);
    const int calls = std::max(3, static_cast<int>(options.batch_seconds / std::max(once, 1e-6)));
    std::vector<double> one, two;
    for (int round = 0; round < std::max(3, options.batches); ++round) {
      one.push_back(compressed_allreduce_seconds(spec, 1, calls));
      two.push_back(compressed_allreduce_seconds(spec, 2, calls));
    }
    const double alone = median(std::move(one)) / kCodecElements;
    const double pair = median(std::move(two)) / kCodecElements;
    // fp16 and bf16 ring-reduce their payload, a decode and add a hop: the
    // same split holds. Noise can put the pair under one rank: no decode.
    const double decode = std::clamp(pair - alone, 0.0, alone);
    profile.codecs[std::string(comm::compression::method_name(method))] = {.encode = alone - decode,
                                                                           .decode = decode};
    if (progress)
      progress(fmt::format("codec {}: encode {:.2f} ns, decode {:.2f} ns an element (one thread)",
                           comm::compression::method_name(method), 1e9 * (alone - decode), 1e9 * decode));
  }
  kernels::set_threads(threads);
}

double measure_gemm_rate(const CalibrationOptions& options) {
  const int threads = kernels::threads();
  kernels::set_threads(1);  // one rank's thread
  Work gemm(kGemm * kGemm);
  const double seconds = time_calls([&] { gemm.gemm(); }, options);
  kernels::set_threads(threads);
  return kGemmFlops / seconds;
}

std::string busy_host_contention(const HostProfile& profile) {
  const size_t free_cores = std::min(profile.contention_compute.size(), static_cast<size_t>(profile.cores));
  for (size_t k = 2; k <= free_cores; ++k)
    if (profile.contention_compute[k - 1] > 1.5)
      return fmt::format("{} ranks at once ran x{:.2f} slower each on {} cores: the cores were not free (another "
                         "process?)",
                         k, profile.contention_compute[k - 1], profile.cores);
  return "";
}

double measure_bf16_gemm_rate(const CalibrationOptions& options) {
  if (!kernels::cpu_has_avx512_bf16()) return 0;
  const int threads = kernels::threads();
  kernels::set_threads(1);  // one rank's thread
  const std::vector<kernels::bf16> a(kGemm * kGemm, kernels::to_bf16(1.0f)), b(kGemm * kGemm, kernels::to_bf16(0.5f));
  std::vector<float> c(kGemm * kGemm);
  // The first call (time_calls' warm-up) builds the shape's oneDNN primitive.
  const double seconds = time_calls([&] {
    kernels::gemm_bf16(false, false, kGemm, kGemm, kGemm, 1, a.data(), kGemm, b.data(), kGemm, 0, c.data(), kGemm);
  }, options);
  kernels::set_threads(threads);
  return kGemmFlops / seconds;
}

void measure_host(HostProfile& profile, const CalibrationOptions& options, const CalibrationProgress& progress) {
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  profile.cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int threads = kernels::threads();
  kernels::set_threads(1);  // one rank's thread
  // Each probing thread's buffers (thread 0's also time one rank alone).
  const size_t ks = static_cast<size_t>(std::max(1, options.max_ranks));
  std::vector<Work> gemms, streams;
  for (size_t t = 0; t < ks; ++t) {
    gemms.emplace_back(kGemm * kGemm);
    streams.emplace_back(kStream);
  }
  Work& stream = streams.front();
  profile.flops = measure_gemm_rate(options);
  const double gemm_alone = kGemmFlops / profile.flops;
  const double stream_alone = time_calls([&] { stream.stream(); }, options);
  profile.flops_bf16 = measure_bf16_gemm_rate(options);
  profile.memory_bandwidth = kStreamBytes / stream_alone;
  // The same stream over a working set well inside the last-level cache:
  // the reported one, at most 8 MiB (a virtual machine reports its host's
  // whole cache, 320 MiB here, of which it gets a slice).
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  profile.cache_bytes = std::min(l3 > 0 ? static_cast<double>(l3) : 8.0 * (1 << 20), 8.0 * (1 << 20));
  Work cached(static_cast<int64_t>(profile.cache_bytes / 4 / sizeof(float) / 3));
  profile.cache_bandwidth = 3.0 * static_cast<double>(cached.c.size()) * sizeof(float) /
                            time_calls([&] { cached.stream(); }, options);
  say(fmt::format("one rank: {:.1f} GFLOP/s ({}x{} GEMM), {:.1f} GB/s streamed ({:.1f} GB/s within the {:.0f} MiB "
                  "cache); {} cores",
                  profile.flops / 1e9, kGemm, kGemm, profile.memory_bandwidth / 1e9, profile.cache_bandwidth / 1e9,
                  profile.cache_bytes / (1 << 20), profile.cores));
  say(profile.flops_bf16 > 0 ? fmt::format("one rank: {:.1f} GFLOP/s bf16 (the same GEMM, bf16 inputs, fp32 "
                                           "accumulation)",
                                           profile.flops_bf16 / 1e9)
                             : std::string("one rank: no bf16 GEMM rate (this CPU has no AVX512_BF16)"));
  // Contention: in each round, one rank alone and then k at once, back to
  // back, so a slow spell of the shared host slows both sides of a ratio;
  // the median ratio over the rounds (at least five).
  const int gemm_calls = std::max(2, static_cast<int>(4 * options.batch_seconds / gemm_alone));
  const int stream_calls = std::max(2, static_cast<int>(4 * options.batch_seconds / stream_alone));
  const int rounds = std::max(5, options.batches);
  // A busy spell that outlasts the rounds shows as ranks that cannot run
  // side by side on free cores (busy_host_contention): measured again,
  // up to contention_attempts in all, then kept and named.
  for (int attempt = 1;; ++attempt) {
    std::vector<std::vector<double>> compute(ks), memory(ks);
    for (int round = 0; round < rounds; ++round) {
      const double gemm_one = concurrent_seconds(gemms, 1, false, gemm_calls);
      const double stream_one = concurrent_seconds(streams, 1, true, stream_calls);
      for (size_t k = 2; k <= ks; ++k) {
        compute[k - 1].push_back(concurrent_seconds(gemms, static_cast<int>(k), false, gemm_calls) / gemm_one);
        memory[k - 1].push_back(concurrent_seconds(streams, static_cast<int>(k), true, stream_calls) / stream_one);
      }
    }
    profile.contention_compute = {1};
    profile.contention_memory = {1};
    for (size_t k = 2; k <= ks; ++k) {
      profile.contention_compute.push_back(std::max(1.0, median(compute[k - 1])));
      profile.contention_memory.push_back(std::max(1.0, median(memory[k - 1])));
    }
    const std::string busy = busy_host_contention(profile);
    if (busy.empty() || attempt >= options.contention_attempts) {
      if (!busy.empty())
        say(fmt::format("warning: {}; kept after {} measurements: predictions from this spec will be off", busy,
                        attempt));
      break;
    }
    say(busy + "; measuring the contention again");
  }
  for (size_t k = 2; k <= ks; ++k)
    say(fmt::format("{} ranks at once: compute x{:.2f}, memory x{:.2f} (median of {} rounds)", k,
                    profile.contention_compute[k - 1], profile.contention_memory[k - 1], rounds));
  kernels::set_threads(threads);
}

int time_kernels(HostProfile& profile, const std::vector<parallel::Program>& programs,
                 const CalibrationOptions& options, const CalibrationProgress& progress) {
  PX_CHECK(profile.flops > 0 && profile.memory_bandwidth > 0, "time_kernels: measure_host first");
  struct Pending {
    const parallel::Program* program;
    int graph;
    int node;
  };
  const int threads = kernels::threads();
  std::map<std::string, Pending> pending;
  for (const parallel::Program& p : programs)
    for (const parallel::Instr& instr : p.instrs)
      if (const auto* c = std::get_if<parallel::Compute>(&instr.op)) {
        const int graph = p.micro_batches.at(static_cast<size_t>(instr.micro_batch)).graph;
        const Graph& g = p.graphs.at(static_cast<size_t>(graph));
        const std::string key = plan::kernel_key(g, g.nodes()[static_cast<size_t>(c->node)], threads);
        if (!profile.kernels.count(key)) pending.emplace(key, Pending{&p, graph, c->node});
      }
  // The batches of a kernel are spread over a chunk of kernels' worth of
  // time (batch b of every kernel in the chunk, then batch b + 1), so a
  // slow spell of the shared host spoils one batch of many kernels, which
  // the median drops, not every batch of a few: timed back to back, a
  // spell once made a run of GPT kernels 6-23x slow. A chunk holds inputs
  // of at most kChunkBytes.
  constexpr int64_t kChunkBytes = int64_t{256} << 20;
  struct Prepared {
    std::string key;
    const Graph* graph;
    const Node* node;
    OpContext context;
    std::vector<Tensor> inputs, outputs;
    std::vector<const Tensor*> in;
    std::vector<Tensor*> out;
    std::vector<double> per_call;
    void run() { node->def->forward(context, node->attrs, in, out); }
  };
  Rng rng(7);
  int done = 0;
  auto it = pending.begin();
  while (it != pending.end()) {
    std::vector<std::unique_ptr<Prepared>> chunk;  // unique_ptr: in/out point into the entry
    int64_t bytes = 0;
    for (; it != pending.end() && (chunk.empty() || bytes < kChunkBytes); ++it) {
      const auto& [key, at] = *it;
      const Graph& g = at.program->graphs[static_cast<size_t>(at.graph)];
      const std::vector<ShardBox>& boxes = at.program->boxes[static_cast<size_t>(at.graph)];
      auto k = std::make_unique<Prepared>(Prepared{.key = key, .graph = &g,
                                                   .node = &g.nodes()[static_cast<size_t>(at.node)],
                                                   .context = {.seed = 1, .inputs = {}, .outputs = {}}});
      const Node& node = *k->node;
      for (ValueId v : node.inputs) {
        k->inputs.push_back(Tensor::empty(g.spec(v).shape, g.spec(v).dtype));
        fill(k->inputs.back(), rng);
        bytes += static_cast<int64_t>(k->inputs.back().nbytes());
        k->context.inputs.push_back(boxes[static_cast<size_t>(v)]);
      }
      for (size_t o = 0; o < node.outputs.size(); ++o) {
        const TensorSpec& spec = g.spec(node.outputs[o]);
        k->outputs.push_back(o == 0 && node.def->output_is_view ? k->inputs.front().reshape(spec.shape)
                                                                : Tensor::empty(spec.shape, spec.dtype));
        bytes += static_cast<int64_t>(k->outputs.back().nbytes());
        k->context.outputs.push_back(boxes[static_cast<size_t>(node.outputs[o])]);
      }
      for (const Tensor& t : k->inputs) k->in.push_back(&t);
      for (Tensor& t : k->outputs) k->out.push_back(&t);
      k->run();  // warm: first-touch pages, caches, pools
      chunk.push_back(std::move(k));
    }
    for (int b = 0; b < std::max(1, options.batches); ++b)
      for (auto& k : chunk) k->per_call.push_back(time_batch([&] { k->run(); }, options.batch_seconds));
    for (auto& k : chunk) {
      profile.kernels[k->key] = {.op = k->node->op(),
                                 .threads = threads,
                                 .roofline = plan::roofline_seconds(profile, plan::node_cost(*k->graph, *k->node)),
                                 .seconds = median(std::move(k->per_call))};
      if (progress && (++done % 20 == 0 || done == static_cast<int>(pending.size())))
        progress(fmt::format("timed {} of {} kernels", done, pending.size()));
    }
  }
  return static_cast<int>(pending.size());
}

}  // namespace px
