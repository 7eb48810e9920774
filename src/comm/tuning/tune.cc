// tune_cost_model (benchmark.h): measure the link parameters, then fit each
// allreduce algorithm's factors to measured times, so predictions track this
// host (its caches, its scheduler) rather than textbook constants.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "comm/reduction.h"
#include "comm/tuning/benchmark.h"

namespace px::comm {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double agree_max(Communicator& comm, double value) {
  float v = static_cast<float>(value);
  allreduce(comm, std::span<float>(&v, 1), Reduction::max,
            {.algorithm = Algorithm::recursive_doubling});
  return v;
}

// Half the round trip of `bytes` between ranks 0 and 1 (others idle).
double ping_pong(Communicator& comm, size_t bytes, int rounds) {
  std::vector<char> buffer(std::max<size_t>(bytes, 1));
  barrier(comm);
  double half = 0;
  if (comm.rank() < 2 && comm.size() >= 2) {
    const int peer = 1 - comm.rank();
    const Step step{"tune ping-pong", 0};
    uint32_t tag = comm.next_tag();
    auto start = Clock::now();
    for (int i = 0; i < rounds; ++i) {
      if (comm.rank() == 0) {
        Request send = comm.isend(peer, tag, buffer.data(), bytes);
        comm.wait(send, step);
        Request recv = comm.irecv(peer, tag, buffer.data(), bytes);
        comm.wait(recv, step);
      } else {
        Request recv = comm.irecv(peer, tag, buffer.data(), bytes);
        comm.wait(recv, step);
        Request send = comm.isend(peer, tag, buffer.data(), bytes);
        comm.wait(send, step);
      }
    }
    half = seconds_since(start) / rounds / 2;
  } else {
    comm.next_tag();  // keep tag sequences equal on every rank
  }
  return agree_max(comm, half);
}

// Seconds per byte of dst += src over cache-resident buffers.
double reduce_rate(Communicator& comm) {
  std::vector<float> a(1 << 16, 1.0f), b(1 << 16, 0.0f);
  auto start = Clock::now();
  const int rounds = 200;
  for (int i = 0; i < rounds; ++i) reduce_into(b.data(), a.data(), a.size(), DType::f32, Reduction::sum);
  return agree_max(comm, seconds_since(start) / rounds / (a.size() * 4.0));
}

// One measured time and the model's terms for it: t ~ w · x with
// x = (alpha · messages, volume · cached, volume · (1 - cached)).
struct Observation {
  std::array<double, 3> x;
  double seconds;
};

// Non-negative least squares in relative error, sum ((w · x_i - t_i) / t_i)^2
// with w >= 0: with three unknowns, the best of the unconstrained solutions
// over every subset of free factors (the others 0) that is feasible.
// Returns the factors and the sum of squared relative errors.
std::pair<std::array<double, 3>, double> fit_relative(const std::vector<Observation>& data) {
  std::array<double, 3> best{};
  double best_error = INFINITY;
  for (int mask = 1; mask < 8; ++mask) {
    int index[3], k = 0;
    for (int j = 0; j < 3; ++j)
      if (mask & (1 << j)) index[k++] = j;
    double m[3][4] = {};
    for (const Observation& o : data)
      for (int r = 0; r < k; ++r) {
        for (int c = 0; c < k; ++c)
          m[r][c] += o.x[index[r]] * o.x[index[c]] / (o.seconds * o.seconds);
        m[r][3] += o.x[index[r]] / o.seconds;
      }
    bool singular = false;
    for (int c = 0; c < k && !singular; ++c) {  // Gauss-Jordan; the matrix is SPD
      if (m[c][c] <= 0) { singular = true; break; }
      for (int r = 0; r < k; ++r) {
        if (r == c) continue;
        double f = m[r][c] / m[c][c];
        for (int j = 0; j < 4; ++j) m[r][j] -= f * m[c][j];
      }
    }
    if (singular) continue;
    std::array<double, 3> w{};
    bool feasible = true;
    for (int r = 0; r < k; ++r) {
      w[index[r]] = m[r][3] / m[r][r];
      feasible &= w[index[r]] >= 0 && std::isfinite(w[index[r]]);
    }
    if (!feasible) continue;
    double error = 0;
    for (const Observation& o : data) {
      double predicted = w[0] * o.x[0] + w[1] * o.x[1] + w[2] * o.x[2];
      error += (predicted / o.seconds - 1) * (predicted / o.seconds - 1);
    }
    if (error < best_error) best_error = error, best = w;
  }
  return {best, best_error};
}

std::vector<Observation> observations(const CostModel& model, const std::vector<BenchmarkRow>& rows,
                                      Algorithm algorithm, int ranks) {
  std::vector<Observation> data;
  for (const auto& row : rows) {
    if (row.algorithm != algorithm || row.ranks != ranks) continue;
    CostQuery query{Collective::allreduce, algorithm, static_cast<double>(row.bytes), row.ranks};
    CostTerms terms = cost_terms(query);
    const LinkCost& link = terms.shared_memory ? model.shared_memory : model.transport;
    const double volume = link.beta * terms.bytes_sent + link.gamma * terms.bytes_reduced;
    const double cached = cached_share(model, query);
    data.push_back({{link.alpha * terms.messages, volume * cached, volume * (1 - cached)},
                    row.seconds});
  }
  return data;
}

// Where the cliff may sit (working set p · n, MiB) and how sharp it may be:
// around the 32 MiB L3, which other tenants share, in steps fine enough
// for the 1.5x sizes between tuned ones. At 4 ranks one cliff spanned
// p · n = 12..24 MiB (exponent 6-8); at 2 ranks 16..32 MiB.
constexpr double kCacheGridMib[] = {6, 8, 10, 12, 14, 16, 18, 20, 24, 28, 32, 40, 48};
constexpr double kCliffGrid[] = {2, 3, 4, 6, 8};

}  // namespace

CostModel fit_allreduce_model(const CostModel& links, const std::vector<BenchmarkRow>& rows,
                              double* rms_relative_error) {
  std::vector<std::pair<Algorithm, int>> groups;  // (algorithm, ranks) seen in rows
  for (const auto& row : rows)
    if (std::find(groups.begin(), groups.end(), std::pair{row.algorithm, row.ranks}) ==
        groups.end())
      groups.emplace_back(row.algorithm, row.ranks);
  // Per (algorithm, ranks): the cache size and cliff (from a small grid
  // around L3) with the factors that fit its timings best. The model's own
  // pair, for algorithms not tuned, is the one that fits most rows best.
  CostModel best = links;
  double best_error = 0;
  std::map<std::pair<double, double>, double> total_by_pair;
  for (auto [algorithm, ranks] : groups) {
    const std::string key = fit_key(Collective::allreduce, algorithm, ranks);
    double group_best = INFINITY;
    for (double cache_mib : kCacheGridMib)
      for (double cliff : kCliffGrid) {
        CostModel candidate = links;
        candidate.fits[key] = {.cache_bytes = cache_mib * (1 << 20), .cache_cliff = cliff};
        auto [w, e] = fit_relative(observations(candidate, rows, algorithm, ranks));
        total_by_pair[{cache_mib, cliff}] += e;
        if (e < group_best) {
          group_best = e;
          best.fits[key] = {w[0], w[1], w[2], cache_mib * (1 << 20), cliff};
        }
      }
    best_error += group_best;
  }
  if (!total_by_pair.empty()) {
    auto most = std::min_element(total_by_pair.begin(), total_by_pair.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    best.cache_bytes = most->first.first * (1 << 20);
    best.cache_cliff = most->first.second;
  }
  if (rms_relative_error)
    *rms_relative_error = std::sqrt(best_error / std::max<size_t>(1, rows.size()));
  return best;
}

CostModel measure_links(Communicator& comm, const ProgressFn& progress) {
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  CostModel model = default_cost_model(comm.backend());
  model.fits.clear();
  if (comm.size() < 2) return model;
  const double small = ping_pong(comm, 8, 2000);
  const double large = ping_pong(comm, 4 << 20, 20);
  model.transport.alpha = small;
  model.transport.beta = std::max(1e-12, (large - small) / (4 << 20));
  model.transport.gamma = reduce_rate(comm);
  model.shared_memory.gamma = model.transport.gamma;
  say(fmt::format("transport: alpha {:.2f} us, beta {:.3f} GB/s, gamma {:.3f} GB/s reduced",
                  model.transport.alpha * 1e6, 1e-9 / model.transport.beta,
                  1e-9 / model.transport.gamma));
  if (runnable(comm, Collective::allreduce, Algorithm::shared_memory)) {
    // A quick probe stays quick on a busy host: a batch taken under foreign
    // load is retaken once (after up to 2 s of waiting for quiet), then kept;
    // the default 8 retakes made it wait ~100 s with one core busy.
    BenchmarkOptions probe{.algorithms = {Algorithm::shared_memory}, .sizes = {4, 256 << 10},
                           .rounds = 3, .max_retakes = 1, .max_retake_seconds = 0};
    auto rows = run_benchmark(comm, probe);
    model.shared_memory.alpha = rows[0].seconds / 2;  // 2 synchronizations per stage
    // 2n moved + n reduced per stage: split the rest evenly between beta and gamma.
    double per_byte = std::max(1e-12, (rows[1].seconds - 2 * model.shared_memory.alpha) / (3.0 * (256 << 10)));
    model.shared_memory.beta = per_byte;
    model.shared_memory.gamma = per_byte;
    say(fmt::format("shared memory: alpha {:.2f} us, beta {:.3f} GB/s", model.shared_memory.alpha * 1e6,
                    1e-9 / per_byte));
  }
  return model;
}

namespace {

// Fits `links` to the sweep and reports the fit; the model every rank uses.
CostModel fit_sweep(Communicator& comm, const CostModel& links,
                    const std::vector<BenchmarkRow>& rows, const ProgressFn& say) {
  for (const BenchmarkRow& row : rows)
    say(fmt::format("sweep {:>9} B {:<26} {:>12.1f} us (spread {:.0f}%, retaken {}, dirty {})",
                    row.bytes, algorithm_name(row.algorithm), row.seconds * 1e6,
                    row.spread * 100, row.retaken, row.dirty));
  std::vector<Algorithm> algorithms;
  for (const auto& row : rows)
    if (std::find(algorithms.begin(), algorithms.end(), row.algorithm) == algorithms.end())
      algorithms.push_back(row.algorithm);
  double rms = 0;
  CostModel model = fit_allreduce_model(links, rows, &rms);
  say(fmt::format("fit: rms relative error {:.1f}% over {} timings", 100 * rms, rows.size()));
  for (Algorithm algorithm : algorithms) {
    const AlgorithmFit& f = model.fits[fit_key(Collective::allreduce, algorithm, comm.size())];
    say(fmt::format("{:<26} latency x{:.2f}  in-cache bandwidth x{:.2f}  memory x{:.2f}  "
                    "cache {:.0f} MiB, cliff {:.0f}",
                    algorithm_name(algorithm), f.latency, f.bandwidth, f.memory,
                    f.cache_bytes / (1 << 20), f.cache_cliff));
  }
  comm.set_cost_model(std::make_shared<CostModel>(model));
  return model;
}

}  // namespace

CostModel tune_cost_model(Communicator& comm, const std::vector<int64_t>& sizes,
                          const ProgressFn& progress, std::vector<BenchmarkRow>* sweep_rows) {
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  CostModel model = measure_links(comm, say);
  if (comm.size() < 2) return model;
  comm.set_cost_model(std::make_shared<CostModel>(model));
  auto rows = run_benchmark(comm, {.sizes = sizes}, {}, say);
  if (sweep_rows) *sweep_rows = rows;
  return fit_sweep(comm, model, rows, say);
}

std::string unsettled_reason(const std::vector<BenchmarkRow>& sweep,
                             const std::vector<BenchmarkRow>& check, int rounds,
                             double max_disagreement) {
  std::vector<std::string> why;
  double worst = 0;
  std::string worst_what;
  for (const BenchmarkRow& c : check)
    for (const BenchmarkRow& s : sweep)
      if (s.algorithm == c.algorithm && s.bytes == c.bytes && s.seconds > 0 && c.seconds > 0) {
        // As the check judges a prediction: the sweep's time predicting the check's.
        const double off = std::fabs(s.seconds / c.seconds - 1);
        if (off > worst) {
          worst = off;
          worst_what = fmt::format("{} at {} B", algorithm_name(c.algorithm), c.bytes);
        }
      }
  if (worst > max_disagreement)
    why.push_back(fmt::format("{} timed twice differs by {:.0f}%, more than {:.0f}%", worst_what,
                              100 * worst, 100 * max_disagreement));
  int unreplaced = 0;
  for (const auto* rows : {&sweep, &check})
    for (const BenchmarkRow& row : *rows) unreplaced += row.unreplaced;
  const double all = static_cast<double>(rounds) * static_cast<double>(sweep.size() + check.size());
  if (unreplaced > 0.01 * all)
    why.push_back(fmt::format("{} of {} batches disturbed and not replaced", unreplaced,
                              static_cast<int64_t>(all)));
  std::string text;
  for (const std::string& w : why) text += (text.empty() ? "" : "; ") + w;
  return text;
}

TunedCheck tune_and_check(Communicator& comm, const std::vector<int64_t>& tuning_sizes,
                          const BenchmarkOptions& check, const ProgressFn& progress,
                          int max_attempts) {
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  TunedCheck result;
  if (check.collective != Collective::allreduce || comm.size() < 2) {
    result.model = tune_cost_model(comm, tuning_sizes, say, &result.sweep);
    result.check = run_benchmark(comm, check, {}, say);
    return result;
  }
  CostModel links = measure_links(comm, say);
  comm.set_cost_model(std::make_shared<CostModel>(links));
  // The sweep's points, then the check's: one set of rounds, separate batches.
  std::vector<BenchmarkPoint> points;
  for (int64_t bytes : tuning_sizes)
    for (Algorithm a : algorithms_for(Collective::allreduce))
      if (runnable(comm, Collective::allreduce, a)) points.push_back({a, bytes});
  const size_t swept = points.size();
  for (int64_t bytes : check.sizes)
    if (check.algorithms.empty()) {
      for (Algorithm a : algorithms_for(Collective::allreduce))
        if (runnable(comm, Collective::allreduce, a)) points.push_back({a, bytes});
    } else {
      for (Algorithm a : check.algorithms) points.push_back({a, bytes});
    }
  for (result.attempts = 1;; ++result.attempts) {
    say(fmt::format("timing {} sweep and {} check points together, {} rounds", swept,
                    points.size() - swept, check.rounds));
    std::vector<BenchmarkRow> rows = time_points(comm, check, points, say);
    result.sweep.assign(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(swept));
    result.check.assign(rows.begin() + static_cast<std::ptrdiff_t>(swept), rows.end());
    result.unsettled = unsettled_reason(result.sweep, result.check, check.rounds);
    if (result.unsettled.empty()) break;
    if (result.attempts >= max_attempts) {
      say(fmt::format("timings still unsettled after {} attempts ({}); fitting the last",
                      result.attempts, result.unsettled));
      break;
    }
    say(fmt::format("timings unsettled ({}): the host changed state; timing again",
                    result.unsettled));
  }
  result.model = fit_sweep(comm, links, result.sweep, say);
  for (BenchmarkRow& row : result.check) {
    const Algorithm modelled = row.algorithm == Algorithm::automatic ? Algorithm::ring : row.algorithm;
    row.predicted_seconds = predicted_seconds(
        result.model, {Collective::allreduce, modelled, static_cast<double>(row.bytes), row.ranks,
                       check.collective_options.servers, check.collective_options.ranks_per_node});
  }
  return result;
}

}  // namespace px::comm
