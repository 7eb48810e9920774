#include "comm/benchmark.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

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

// Mean seconds per call on the slowest rank, median over repeats.
std::pair<double, int> time_calls(Communicator& comm, const std::function<void()>& body,
                                  int iterations, int repeats, double target_seconds) {
  body();  // warm-up: pages, shared segments, sub-groups
  if (iterations <= 0) {
    barrier(comm);
    auto start = Clock::now();
    body();
    double one = max_over_ranks(comm, std::chrono::duration<double>(Clock::now() - start).count());
    iterations = std::clamp(static_cast<int>(target_seconds / std::max(one, 1e-7)), 1, 20000);
  }
  std::vector<double> samples;
  for (int rep = 0; rep < repeats; ++rep) {
    barrier(comm);
    auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) body();
    double mean = std::chrono::duration<double>(Clock::now() - start).count() / iterations;
    samples.push_back(max_over_ranks(comm, mean));
  }
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return {samples[samples.size() / 2], iterations};
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

std::vector<BenchmarkRow> run_benchmark(Communicator& comm, const BenchmarkOptions& options,
                                        const std::function<void(const BenchmarkRow&)>& on_row) {
  std::vector<Algorithm> algorithms = options.algorithms;
  if (algorithms.empty())
    for (Algorithm a : algorithms_for(options.collective))
      if (runnable(comm, options.collective, a)) algorithms.push_back(a);
  std::vector<BenchmarkRow> rows;
  for (int64_t bytes : options.sizes) {
    const int64_t n = bytes / 4;
    Buffers buffers;
    buffers.input.assign(n, 0.0f);
    buffers.output.assign(n, 0.0f);
    for (Algorithm algorithm : algorithms) {
      CollectiveOptions collective_options = options.collective_options;
      collective_options.algorithm = algorithm;
      BenchmarkRow row{.collective = options.collective, .algorithm = algorithm,
                       .ranks = comm.size(), .bytes = n * 4};
      if (options.check)
        row.checked = check_once(comm, options.collective, n, buffers, collective_options);
      std::fill(buffers.output.begin(), buffers.output.end(), 0.0f);  // no inf growth
      auto [seconds, iterations] = time_calls(
          comm, [&] { call(comm, options.collective, n, buffers, collective_options); },
          options.iterations, options.repeats, options.target_seconds);
      row.seconds = seconds;
      row.iterations = iterations;
      row.algbw = row.bytes / seconds / 1e9;
      row.busbw = row.algbw * bus_factor(options.collective, comm.size());
      row.predicted_seconds = predicted_seconds(
          comm.cost_model(),
          CostQuery{options.collective, algorithm == Algorithm::automatic ? Algorithm::ring : algorithm,
                    static_cast<double>(row.bytes), comm.size(), collective_options.servers,
                    collective_options.ranks_per_node});
      rows.push_back(row);
      if (on_row) on_row(row);
    }
  }
  return rows;
}

}  // namespace px::comm
