#include "comm/benchmark.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "comm/machine_load.h"
#include "comm/reduction.h"
#include "core/error.h"

namespace px::comm {
namespace {

using Clock = std::chrono::steady_clock;

double max_over_ranks(Communicator& comm, double value) {
  float v = static_cast<float>(value);
  allreduce(comm, std::span<float>(&v, 1), Reduction::max, {.algorithm = Algorithm::recursive_doubling});
  return v;
}

// Buffers for one size: n float32 elements per rank (all_to_all: n in total).
struct Buffers {
  std::vector<float> input, output;
};

// One call of the collective on `buffers` for n elements.
void call(Communicator& comm, Collective collective, int64_t n, Buffers& b,
          const CollectiveOptions& options) {
  const int p = comm.size(), r = comm.rank();
  switch (collective) {
    case Collective::allreduce:
      return allreduce(comm, Buffer(b.output.data(), n, DType::f32), Reduction::sum, options);
    case Collective::reduce_scatter:
      return reduce_scatter(comm, b.input.data(),
                            Buffer(b.output.data(), block(n, p, r).count, DType::f32), n,
                            Reduction::sum, options);
    case Collective::allgather:
      return allgather(comm, b.input.data(), Buffer(b.output.data(), n, DType::f32), options);
    case Collective::broadcast:
      return broadcast(comm, Buffer(b.output.data(), n, DType::f32), 0, options);
    case Collective::reduce:
      return reduce(comm, Buffer(b.output.data(), n, DType::f32), Reduction::sum, 0, options);
    case Collective::all_to_all:
      return all_to_all(comm, b.input.data(), Buffer(b.output.data(), n / p * p, DType::f32),
                        options);
    case Collective::barrier: return barrier(comm, options);
  }
}

// Fills inputs with rank + 1 and checks the collective's output against it.
bool check_once(Communicator& comm, Collective collective, int64_t n, Buffers& b,
                const CollectiveOptions& options) {
  const int p = comm.size(), r = comm.rank();
  std::fill(b.input.begin(), b.input.end(), static_cast<float>(r + 1));
  std::fill(b.output.begin(), b.output.end(), static_cast<float>(r + 1));
  call(comm, collective, n, b, options);
  const float sum = p * (p + 1) / 2.0f;
  int64_t count = n;
  float want = sum;
  switch (collective) {
    case Collective::reduce_scatter: count = block(n, p, r).count; break;
    case Collective::broadcast: want = 1.0f; break;
    case Collective::reduce: if (r != 0) count = 0; break;
    case Collective::allgather: count = 0; break;  // blocks hold their owner's rank + 1
    case Collective::all_to_all: count = 0; break;
    case Collective::barrier: count = 0; break;
    default: break;
  }
  bool ok = true;
  for (int64_t i = 0; i < count; ++i) ok &= b.output[i] == want;
  if (collective == Collective::allgather)
    for (int q = 0; q < p; ++q) {
      Block blk = block(n, p, q);
      for (int64_t i = blk.begin; i < blk.begin + blk.count; ++i) ok &= b.output[i] == q + 1.0f;
    }
  float bad = ok ? 0.0f : 1.0f;
  allreduce(comm, std::span<float>(&bad, 1), Reduction::max, {.algorithm = Algorithm::recursive_doubling});
  return bad == 0.0f;
}

// Calls per timed batch so that a batch lasts about target_seconds on the
// slowest rank (agreed by all ranks), after two warm-up calls.
int calibrate(Communicator& comm, const std::function<void()>& body, int iterations,
              double target_seconds) {
  body();  // warm-up: pages, shared segments, sub-groups
  body();
  if (iterations > 0) return iterations;
  int calls = 1;
  double elapsed = 0;
  for (;;) {  // grow until a batch lasts a tenth of the target
    barrier(comm);
    auto start = Clock::now();
    for (int i = 0; i < calls; ++i) body();
    elapsed = max_over_ranks(comm, std::chrono::duration<double>(Clock::now() - start).count());
    if (elapsed >= target_seconds / 10 || calls >= 4096) break;
    calls *= 4;
  }
  return std::clamp(static_cast<int>(std::ceil(target_seconds * calls / elapsed)), 1, 1 << 20);
}

struct Sample {
  double seconds = 0;
  bool clean = true;
};

// Rank 0's DRAM probe (its memory is contended when slowed), agreed by all.
bool memory_contended(Communicator& comm, MemoryProbe& probe, double limit) {
  float slowdown = comm.rank() == 0 ? static_cast<float>(probe.slowdown()) : 0.0f;
  allreduce(comm, std::span<float>(&slowdown, 1), Reduction::max,
            {.algorithm = Algorithm::recursive_doubling});
  return slowdown > limit;
}

// One batch of `iterations` calls: mean seconds per call on the slowest rank,
// retaken (after the machine quietens) while foreign CPU load exceeds the
// limit or, with `probe`, while a DRAM copy after the batch ran slow.
Sample timed_batch(Communicator& comm, const std::function<void()>& body, int iterations,
                   const BenchmarkOptions& options, MemoryProbe* probe, int& retaken) {
  LoadMeter meter(comm);
  for (int attempt = 0;; ++attempt) {
    barrier(comm);
    meter.start();
    auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) body();
    double mean = std::chrono::duration<double>(Clock::now() - start).count() / iterations;
    Sample sample{max_over_ranks(comm, mean), true};
    const double foreign = meter.finish();  // collective: equal on every rank
    const bool contended =
        probe && memory_contended(comm, *probe, options.max_memory_slowdown);
    if (foreign <= options.max_foreign_load && !contended) return sample;
    if (attempt >= options.max_retakes) return {sample.seconds, false};
    ++retaken;
    wait_for_quiet_machine(options.max_foreign_load, 0.05, 2.0);
    if (probe)  // and for the memory to recover, up to a second
      for (int wait = 0; wait < 10 && memory_contended(comm, *probe, options.max_memory_slowdown);
           ++wait)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

double bus_factor(Collective collective, int ranks) {
  const double p = ranks;
  switch (collective) {
    case Collective::allreduce: return 2 * (p - 1) / p;
    case Collective::reduce_scatter:
    case Collective::allgather:
    case Collective::all_to_all: return (p - 1) / p;
    default: return 1;
  }
}

std::vector<int64_t> default_benchmark_sizes() {
  std::vector<int64_t> sizes;
  for (int64_t bytes = 4; bytes <= (int64_t{256} << 20); bytes *= 4) sizes.push_back(bytes);
  return sizes;
}

std::vector<int64_t> default_tuning_sizes() {
  std::vector<int64_t> sizes;
  for (int64_t bytes = 64 << 10; bytes <= (64 << 20); bytes *= 2) sizes.push_back(bytes);
  return sizes;
}

std::vector<BenchmarkRow> run_benchmark(Communicator& comm, const BenchmarkOptions& options,
                                        const std::function<void(const BenchmarkRow&)>& on_row) {
  std::vector<Algorithm> algorithms = options.algorithms;
  if (algorithms.empty())
    for (Algorithm a : algorithms_for(options.collective))
      if (runnable(comm, options.collective, a)) algorithms.push_back(a);
  std::vector<BenchmarkRow> rows;
  const int count = static_cast<int>(algorithms.size());
  MemoryProbe probe;  // used on rank 0 only
  for (int64_t bytes : options.sizes) {
    const int64_t n = bytes / 4;
    Buffers buffers;
    buffers.input.assign(n, 0.0f);
    buffers.output.assign(n, 0.0f);
    std::vector<BenchmarkRow> size_rows;
    std::vector<std::function<void()>> bodies;
    std::vector<CollectiveOptions> per_algorithm(count, options.collective_options);
    for (int a = 0; a < count; ++a) {
      per_algorithm[a].algorithm = algorithms[a];
      BenchmarkRow row{.collective = options.collective, .algorithm = algorithms[a],
                       .ranks = comm.size(), .bytes = n * 4};
      if (options.check)
        row.checked = check_once(comm, options.collective, n, buffers, per_algorithm[a]);
      size_rows.push_back(row);
      bodies.push_back([&, a] { call(comm, options.collective, n, buffers, per_algorithm[a]); });
    }
    std::fill(buffers.output.begin(), buffers.output.end(), 0.0f);  // sums of 0 stay finite
    for (int a = 0; a < count; ++a)
      size_rows[a].iterations =
          calibrate(comm, bodies[a], options.iterations, options.target_seconds);
    // Repeats interleaved across algorithms, the order rotating each round.
    const bool probe_memory =
        static_cast<double>(n) * 4 * comm.size() > options.memory_probe_above;
    std::vector<std::vector<Sample>> samples(count);
    for (int rep = 0; rep < options.repeats; ++rep)
      for (int i = 0; i < count; ++i) {
        const int a = (rep + i) % count;
        samples[a].push_back(
            timed_batch(comm, bodies[a], size_rows[a].iterations, options,
                        probe_memory ? &probe : nullptr, size_rows[a].retaken));
      }
    for (int a = 0; a < count; ++a) {
      BenchmarkRow& row = size_rows[a];
      std::vector<double> clean, all;
      for (const Sample& s : samples[a]) {
        all.push_back(s.seconds);
        if (s.clean) clean.push_back(s.seconds);
      }
      const std::vector<double>& kept = clean.empty() ? all : clean;
      row.dirty = static_cast<int>(all.size() - clean.size());
      row.seconds = median(kept);
      row.spread = (*std::max_element(kept.begin(), kept.end()) -
                    *std::min_element(kept.begin(), kept.end())) / row.seconds;
      row.algbw = row.bytes / row.seconds / 1e9;
      row.busbw = row.algbw * bus_factor(options.collective, comm.size());
      const Algorithm modelled =
          row.algorithm == Algorithm::automatic ? Algorithm::ring : row.algorithm;
      row.predicted_seconds = predicted_seconds(
          comm.cost_model(),
          CostQuery{options.collective, modelled, static_cast<double>(row.bytes), comm.size(),
                    options.collective_options.servers, options.collective_options.ranks_per_node});
      rows.push_back(row);
      if (on_row) on_row(row);
    }
  }
  return rows;
}

}  // namespace px::comm
