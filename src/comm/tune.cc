// tune_cost_model (benchmark.h): measure the link parameters, then fit each
// allreduce algorithm's factors to measured times, so predictions track this
// host (its caches, its scheduler) rather than textbook constants.
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>

#include "comm/benchmark.h"
#include "comm/reduction.h"

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

// Least squares in relative error: t_i ~ w · x_i with x = (latency, volume, memory terms).
AlgorithmFit fit(const std::vector<std::array<double, 3>>& x, const std::vector<double>& t,
                 bool with_memory) {
  const int k = with_memory ? 3 : 2;
  double m[3][4] = {};
  for (size_t i = 0; i < t.size(); ++i)
    for (int r = 0; r < k; ++r) {
      for (int c = 0; c < k; ++c) m[r][c] += x[i][r] * x[i][c] / (t[i] * t[i]);
      m[r][3] += x[i][r] / t[i];
    }
  for (int r = 0; r < k; ++r) m[r][r] += 1e-12;  // tiny ridge: rank-deficient sweeps
  for (int c = 0; c < k; ++c)  // Gauss-Jordan (the matrix is SPD: no pivoting)
    for (int r = 0; r < k; ++r) {
      if (r == c) continue;
      double f = m[r][c] / m[c][c];
      for (int j = 0; j < 4; ++j) m[r][j] -= f * m[c][j];
    }
  AlgorithmFit result;
  result.latency = m[0][3] / m[0][0];
  result.bandwidth = m[1][3] / m[1][1];
  result.memory = with_memory ? m[2][3] / m[2][2] : 0.0;
  return result;
}

}  // namespace

CostModel tune_cost_model(Communicator& comm, const std::vector<int64_t>& sizes,
                          const std::function<void(const std::string&)>& progress) {
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  CostModel model = default_cost_model(comm.backend());
  if (comm.size() < 2) return model;

  // Links.
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
    BenchmarkOptions probe{.algorithms = {Algorithm::shared_memory}, .sizes = {4, 256 << 10},
                           .repeats = 3, .target_seconds = 0.02};
    auto rows = run_benchmark(comm, probe);
    model.shared_memory.alpha = rows[0].seconds / 2;  // 2 synchronizations per stage
    // 2n moved + n reduced per stage: split the rest evenly between beta and gamma.
    double per_byte = std::max(1e-12, (rows[1].seconds - 2 * model.shared_memory.alpha) / (3.0 * (256 << 10)));
    model.shared_memory.beta = per_byte;
    model.shared_memory.gamma = per_byte;
    say(fmt::format("shared memory: alpha {:.2f} us, beta {:.3f} GB/s", model.shared_memory.alpha * 1e6,
                    1e-9 / per_byte));
  }

  // Per-algorithm factors over the measured sizes.
  model.fits.clear();
  comm.set_cost_model(std::make_shared<CostModel>(model));
  BenchmarkOptions sweep{.sizes = sizes, .repeats = 3, .target_seconds = 0.03};
  auto rows = run_benchmark(comm, sweep);
  std::vector<Algorithm> algorithms;
  for (const auto& row : rows)
    if (std::find(algorithms.begin(), algorithms.end(), row.algorithm) == algorithms.end())
      algorithms.push_back(row.algorithm);
  for (Algorithm algorithm : algorithms) {
    std::vector<std::array<double, 3>> x;
    std::vector<double> t;
    for (const auto& row : rows) {
      if (row.algorithm != algorithm) continue;
      CostQuery query{Collective::allreduce, algorithm, static_cast<double>(row.bytes), comm.size()};
      CostTerms terms = cost_terms(query);
      const LinkCost& link = terms.shared_memory ? model.shared_memory : model.transport;
      double volume = link.beta * terms.bytes_sent + link.gamma * terms.bytes_reduced;
      x.push_back({link.alpha * terms.messages, volume,
                   volume * row.bytes / (row.bytes + model.cache_bytes)});
      t.push_back(row.seconds);
    }
    AlgorithmFit f = fit(x, t, true);
    if (f.latency < 0 || f.bandwidth < 0 || f.memory < 0) f = fit(x, t, false);
    f.latency = std::max(0.0, f.latency);
    f.bandwidth = std::max(0.0, f.bandwidth);
    f.memory = std::max(0.0, f.memory);
    model.fits[fit_key(Collective::allreduce, algorithm, comm.size())] = f;
    say(fmt::format("{:<26} latency x{:.2f}  bandwidth x{:.2f}  memory x{:.2f}",
                    algorithm_name(algorithm), f.latency, f.bandwidth, f.memory));
  }
  comm.set_cost_model(std::make_shared<CostModel>(model));
  return model;
}

}  // namespace px::comm
