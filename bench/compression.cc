// Gradient compression at a glance: for each method, the bytes one rank hands
// to the transport per allreduce_sum, the reduction against the float32 ring
// allreduce, and the time per call (in-process ranks, slowest rank, median of
// 5 batches). See docs/compression.md.
//   px_bench_compression [--ranks 4] [--rows 1024] [--cols 1024] [--calls 10] [methods...]
//   px_bench_compression --cnn [methods...]   one compressor per parameter of the
//                                             Fashion-MNIST CNN, summed over its tensors
// Methods as parsed by Spec::parse (default: every method).
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "comm/backends.h"
#include "comm/collectives.h"
#include "comm/compression/compressor.h"
#include "core/error.h"
#include "core/rng.h"

namespace {

using namespace px::comm;
using namespace px::comm::compression;

struct Options {
  int ranks = 4;
  int64_t rows = 1024, cols = 1024;
  int calls = 10;
  bool cnn = false;
  std::vector<std::string> methods = {"none", "fp16", "bf16", "int8", "sign", "topk:0.01",
                                      "topk:0.001", "threshold:0.02", "powersgd:1",
                                      "powersgd:2", "powersgd:4"};
};

Options parse(int argc, char** argv) {
  Options options;
  std::vector<std::string> methods;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&] {
      if (i + 1 >= argc) px::fail("{} needs a value", arg);
      return std::string(argv[++i]);
    };
    if (arg == "--ranks") options.ranks = std::stoi(value());
    else if (arg == "--rows") options.rows = std::stoll(value());
    else if (arg == "--cols") options.cols = std::stoll(value());
    else if (arg == "--calls") options.calls = std::stoi(value());
    else if (arg == "--cnn") options.cnn = true;
    else if (arg.starts_with("--")) px::fail("unknown option {}", arg);
    else methods.push_back(arg);
  }
  if (!methods.empty()) options.methods = methods;
  return options;
}

// A gradient-like vector: a drift shared by the ranks plus per-rank noise.
std::vector<float> gradient(int64_t n, int rank, uint64_t step) {
  px::Rng drift(1), noise(px::splitmix64(step * 7919 + static_cast<uint64_t>(rank)));
  std::vector<float> g(n);
  for (float& v : g) v = 0.01f * static_cast<float>(0.3 * drift.normal() + noise.normal());
  return g;
}

struct Tensor {
  int64_t rows, cols;
};

// The parameters of nn/cnn.h's default Fashion-MNIST CNN as (rows, cols)
// matrices: conv weights (out, in·3·3), linear weights (out, in), biases.
std::vector<Tensor> cnn_tensors() {
  return {{32, 9}, {1, 32}, {64, 288}, {1, 64}, {128, 1600}, {1, 128}, {10, 128}, {1, 10}};
}

int64_t cnn_floats() {
  int64_t total = 0;
  for (const Tensor& t : cnn_tensors()) total += t.rows * t.cols;
  return total;
}

void bench(Communicator& comm, const Options& options, const std::string& text) {
  const Spec spec = Spec::parse(text);
  const std::vector<Tensor> tensors =
      options.cnn ? cnn_tensors() : std::vector<Tensor>{{options.rows, options.cols}};
  std::vector<GradientCompressor> compressors;
  std::vector<std::vector<std::vector<float>>> inputs;  // [tensor][step % 4]
  for (const Tensor& t : tensors) {
    compressors.emplace_back(spec, t.rows * t.cols, t.rows, t.cols, 1);
    inputs.emplace_back();
    for (int s = 0; s < 4; ++s) inputs.back().push_back(gradient(t.rows * t.cols, comm.rank(), s));
  }
  std::vector<float> grad;
  uint64_t step = 0;
  WireStats last;
  auto call = [&](double* seconds) {
    last = {};
    for (size_t t = 0; t < tensors.size(); ++t) {
      grad = inputs[t][step % 4];  // copy outside the timed region
      auto start = std::chrono::steady_clock::now();
      last += compressors[t].allreduce_sum(comm, grad, step);
      if (seconds)
        *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    ++step;
  };
  for (int warm = 0; warm < 2; ++warm) call(nullptr);
  std::vector<double> batches;
  for (int batch = 0; batch < 5; ++batch) {
    barrier(comm);
    double seconds = 0;
    for (int c = 0; c < options.calls; ++c) call(&seconds);
    std::vector<float> slowest = {static_cast<float>(seconds / options.calls)};
    allreduce(comm, slowest, Reduction::max);
    batches.push_back(slowest[0]);
  }
  std::sort(batches.begin(), batches.end());
  std::vector<float> bytes = {static_cast<float>(last.bytes_sent), static_cast<float>(last.dense_bytes)};
  allreduce(comm, bytes, Reduction::sum);  // all ranks: the ratio of totals
  if (comm.rank() == 0)
    fmt::print("{:<16} {:>12} {:>12} {:>9.1f}x {:>10.2f}\n", spec.to_string(), last.bytes_sent,
               last.dense_bytes, bytes[0] > 0 ? bytes[1] / bytes[0] : 0.0, batches[2] * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse(argc, argv);
    if (options.cnn)
      fmt::print("# gradient compression, {} in-process ranks, Fashion-MNIST CNN ({} tensors, "
                 "{} floats, one compressor each), {} calls per batch\n",
                 options.ranks, cnn_tensors().size(), cnn_floats(), options.calls);
    else
      fmt::print("# gradient compression, {} in-process ranks, {}x{} floats ({} MiB), {} calls per "
                 "batch\n",
                 options.ranks, options.rows, options.cols, options.rows * options.cols * 4 >> 20,
                 options.calls);
    fmt::print("{:<16} {:>12} {:>12} {:>10} {:>10}\n", "method", "bytes/rank", "f32 ring", "reduction",
               "ms/call");
    run_inproc(options.ranks, [&](Communicator& comm) {
      for (const std::string& method : options.methods) bench(comm, options, method);
    });
  } catch (const px::Error& error) {
    fmt::print(stderr, "error: {}\n", error.what());
    return 1;
  }
  return 0;
}
