#include "comm/tuning/benchmark.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <thread>

#include "comm/reduction.h"
#include "comm/tuning/machine_load.h"
#include "core/error.h"

namespace px::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Consecutive batches judged together by find_disturbed (about half a second).
constexpr int kWindowBatches = 24;
// Points whose working set p · n exceeds this are DRAM-bound here (L2 1 MiB
// per core, L3 32 MiB shared with other tenants): a family of their own.
constexpr double kCacheFamilyBytes = 8 << 20;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

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

// One batch of `iterations` calls: mean seconds per call on the slowest rank,
// retaken at once (after the machine quietens) while other processes used
// more than max_foreign_load of the CPU; counted in `retaken`.
TimedBatch timed_batch(Communicator& comm, const std::function<void()>& body, int iterations,
                       const BenchmarkOptions& options, int& retaken) {
  LoadMeter meter(comm);
  for (int attempt = 0;; ++attempt) {
    barrier(comm);
    meter.start();
    auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) body();
    double mean = std::chrono::duration<double>(Clock::now() - start).count() / iterations;
    TimedBatch batch{.seconds = max_over_ranks(comm, mean)};
    const double foreign = meter.finish();  // collective: equal on every rank
    if (foreign <= options.max_foreign_load) return batch;
    if (attempt >= options.max_retakes) return {.seconds = batch.seconds, .clean = false};
    ++retaken;
    wait_for_quiet_machine(options.max_foreign_load, 0.05, 2.0);
  }
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

std::vector<int64_t> default_tuning_sizes() {
  // Where the cliffs lie (a rank's part passing the 1 MiB L2, p · n the
  // shared L3), a step can fall anywhere between two 2x sizes, and a fit to
  // them cannot tell where: at 4 ranks sharded_parameter_server's cost per
  // byte rose 1.8x between 3 and 4 MiB, and fits to 2 and 4 MiB that differed
  // by noise alone predicted 3 MiB 6% or 30% high. So between 512 KiB and
  // 32 MiB a size sqrt(2) above each 2x one is tuned too.
  std::vector<int64_t> sizes;
  for (int64_t bytes = 64 << 10; bytes <= (64 << 20); bytes *= 2) {
    sizes.push_back(bytes);
    if (bytes >= (512 << 10) && bytes < (32 << 20))
      sizes.push_back(static_cast<int64_t>(std::llround(bytes * std::sqrt(2.0) / 4)) * 4);
  }
  return sizes;
}

int find_disturbed(std::vector<std::vector<TimedBatch>>& batches, const std::vector<int>& family,
                   double max_drift) {
  constexpr size_t kMinBatches = 4;  // fewer in a (window, family): judged by the whole window
  constexpr int kAll = -1;           // the family key of a whole window
  auto usable = [](const TimedBatch& b) { return b.clean && !b.disturbed && b.seconds > 0; };
  const size_t points = batches.size();
  std::map<std::pair<int, int>, double> effect;  // (window, family or kAll) -> log slowdown
  auto effect_of = [&](const TimedBatch& b, size_t p) {
    auto it = effect.find({b.window, family[p]});
    if (it == effect.end()) it = effect.find({b.window, kAll});
    return it == effect.end() ? 0.0 : it->second;
  };
  std::vector<double> level(points, 0.0);  // per point: log seconds in a typical stretch
  for (int iteration = 0; iteration < 4; ++iteration) {
    for (size_t p = 0; p < points; ++p) {
      std::vector<double> values;
      for (const TimedBatch& b : batches[p])
        if (usable(b)) values.push_back(std::log(b.seconds) - effect_of(b, p));
      level[p] = values.empty() ? 0.0 : median(values);
    }
    std::map<std::pair<int, int>, std::vector<double>> residuals;
    for (size_t p = 0; p < points; ++p)
      for (const TimedBatch& b : batches[p])
        if (usable(b)) {
          const double r = std::log(b.seconds) - level[p];
          residuals[{b.window, family[p]}].push_back(r);
          residuals[{b.window, kAll}].push_back(r);
        }
    effect.clear();
    std::map<int, std::vector<double>> by_family;
    for (const auto& [key, values] : residuals)
      if (values.size() >= kMinBatches) by_family[key.second].push_back(effect[key] = median(values));
    for (auto& [key, value] : effect) value -= median(by_family[key.second]);  // typical = 0
  }
  int marked = 0;
  for (size_t p = 0; p < points; ++p)
    for (TimedBatch& b : batches[p])
      if (usable(b) && std::fabs(effect_of(b, p)) > std::log1p(max_drift)) {
        b.disturbed = true;
        ++marked;
      }
  return marked;
}

std::vector<BenchmarkRow> time_points(Communicator& comm, const BenchmarkOptions& options,
                                      const std::vector<BenchmarkPoint>& points,
                                      const ProgressFn& progress) {
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  const int count = static_cast<int>(points.size());
  int64_t most = 0;  // elements; every point uses a prefix of the same buffers
  for (const BenchmarkPoint& point : points) most = std::max(most, point.bytes / 4);
  Buffers buffers;
  buffers.input.assign(most, 0.0f);
  buffers.output.assign(most, 0.0f);
  std::vector<BenchmarkRow> rows(count);
  std::vector<CollectiveOptions> per_point(count, options.collective_options);
  std::vector<std::function<void()>> bodies;
  std::vector<int> family(count);
  for (int i = 0; i < count; ++i) {
    const int64_t n = points[i].bytes / 4;
    per_point[i].algorithm = points[i].algorithm;
    rows[i].collective = options.collective;
    rows[i].algorithm = points[i].algorithm;
    rows[i].ranks = comm.size();
    rows[i].bytes = n * 4;
    if (options.check) rows[i].checked = check_once(comm, options.collective, n, buffers, per_point[i]);
    bodies.push_back([&, i, n] { call(comm, options.collective, n, buffers, per_point[i]); });
    // Slow spells of other tenants hit DRAM-bound points, not cache-bound ones.
    family[i] = static_cast<double>(n) * 4 * comm.size() > kCacheFamilyBytes;
  }
  std::fill(buffers.output.begin(), buffers.output.end(), 0.0f);  // sums of 0 stay finite
  for (int i = 0; i < count; ++i)
    rows[i].iterations = calibrate(comm, bodies[i], options.iterations, options.target_seconds);

  std::vector<std::vector<TimedBatch>> batches(count);
  int taken = 0;
  auto take = [&](int i) {
    TimedBatch batch = timed_batch(comm, bodies[i], rows[i].iterations, options, rows[i].retaken);
    batch.window = taken++ / kWindowBatches;
    batches[i].push_back(batch);
  };
  std::mt19937 shuffler(20261121);  // the same order on every rank
  for (int round = 0; round < options.rounds; ++round) {
    const auto start = Clock::now();
    std::vector<int> order(count);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), shuffler);
    for (int i : order) take(i);
    say(fmt::format("round {}/{}: {} batches in {:.1f} s", round + 1, options.rounds, count,
                    std::chrono::duration<double>(Clock::now() - start).count()));
  }
  // Retake what find_disturbed rejects, a window at a time, padded with
  // batches of other points so that every window can be judged; while the
  // window just taken is itself disturbed the spell goes on: pause, retry.
  auto usable_count = [&](int i) {
    return static_cast<int>(std::count_if(batches[i].begin(), batches[i].end(), [](const TimedBatch& b) {
      return b.clean && !b.disturbed;
    }));
  };
  std::vector<int> owed;  // points short of `rounds` usable batches, one entry per batch
  auto judge = [&] {
    const int marked = find_disturbed(batches, family, options.max_drift);
    owed.clear();
    for (int i = 0; i < count; ++i)
      for (int k = usable_count(i); k < options.rounds; ++k) owed.push_back(i);
    std::shuffle(owed.begin(), owed.end(), shuffler);
    return marked;
  };
  std::vector<int> fillers(count);
  std::iota(fillers.begin(), fillers.end(), 0);
  std::shuffle(fillers.begin(), fillers.end(), shuffler);
  size_t next_filler = 0;
  const auto retakes_start = Clock::now();
  int marked = judge(), windows = 0, pauses = 0, retaken = 0;
  if (marked) say(fmt::format("{} batches in disturbed stretches: retaking", marked));
  while (!owed.empty()) {
    const double elapsed = max_over_ranks(
        comm, std::chrono::duration<double>(Clock::now() - retakes_start).count());
    if (elapsed > options.max_retake_seconds) break;
    taken = (taken + kWindowBatches - 1) / kWindowBatches * kWindowBatches;  // a fresh window
    const int window = taken / kWindowBatches;
    std::vector<int> chunk(owed.begin(), owed.begin() + std::min<size_t>(owed.size(), kWindowBatches));
    for (int i : chunk) ++rows[i].retaken;
    retaken += static_cast<int>(chunk.size());
    while (chunk.size() < kWindowBatches) chunk.push_back(fillers[next_filler++ % fillers.size()]);
    for (int i : chunk) take(i);
    ++windows;
    judge();
    bool spell = false;
    for (int i : chunk)
      for (const TimedBatch& b : batches[i]) spell |= b.window == window && b.disturbed;
    if (spell) {
      ++pauses;
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  if (windows)
    say(fmt::format("retook {} batches in {} windows ({} still disturbed, 1 s pause each); "
                    "{} disturbed batches not replaced within {:.0f} s, left out",
                    retaken, windows, pauses, owed.size(), options.max_retake_seconds));

  constexpr size_t kFewBatches = 5;
  int few = 0;  // points left with fewer batches than that
  for (int i = 0; i < count; ++i) {
    BenchmarkRow& row = rows[i];
    // Batches of disturbed stretches are left out even when no retake
    // replaced them: a point keeps the machine's typical state only (a mix
    // of two states, near half and half, gives a median from either).
    std::vector<double> kept, all;
    for (const TimedBatch& b : batches[i]) {
      all.push_back(b.seconds);
      if (!b.disturbed && b.clean) kept.push_back(b.seconds);
    }
    few += kept.size() < kFewBatches;
    // Counted before the fallbacks below, which keep disturbed batches.
    row.unreplaced = std::max(0, options.rounds - static_cast<int>(kept.size()));
    if (kept.empty())  // every batch disturbed or under foreign load
      for (const TimedBatch& b : batches[i])
        if (b.clean) kept.push_back(b.seconds);
    if (kept.empty()) {  // ... and every one under foreign load
      kept = all;
      row.dirty = static_cast<int>(all.size());
    }
    row.seconds = median(kept);
    row.batches = kept;
    row.spread = (*std::max_element(kept.begin(), kept.end()) -
                  *std::min_element(kept.begin(), kept.end())) / row.seconds;
    row.algbw = row.bytes / row.seconds / 1e9;
    row.busbw = row.algbw * bus_factor(options.collective, comm.size());
    const Algorithm modelled = row.algorithm == Algorithm::automatic ? Algorithm::ring : row.algorithm;
    row.predicted_seconds = predicted_seconds(
        comm.cost_model(),
        CostQuery{options.collective, modelled, static_cast<double>(row.bytes), comm.size(),
                  options.collective_options.servers, options.collective_options.ranks_per_node});
  }
  if (few) say(fmt::format("{} of {} points kept fewer than {} batches", few, count, kFewBatches));
  return rows;
}

std::vector<BenchmarkRow> run_benchmark(Communicator& comm, const BenchmarkOptions& options,
                                        const std::function<void(const BenchmarkRow&)>& on_row,
                                        const ProgressFn& progress) {
  std::vector<Algorithm> algorithms = options.algorithms;
  if (algorithms.empty())
    for (Algorithm a : algorithms_for(options.collective))
      if (runnable(comm, options.collective, a)) algorithms.push_back(a);
  std::vector<BenchmarkPoint> points;
  for (int64_t bytes : options.sizes)
    for (Algorithm a : algorithms) points.push_back({a, bytes});
  std::vector<BenchmarkRow> rows = time_points(comm, options, points, progress);
  if (on_row)
    for (const BenchmarkRow& row : rows) on_row(row);
  return rows;
}

}  // namespace px::comm
