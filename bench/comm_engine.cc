// Overlap of gradient communication with compute, on in-process ranks over a
// bandwidth-limited link: a synthetic model of L layers whose forward and
// backward are sleeps (or busy loops with --busy), each backward layer
// releasing its gradients (a weight and a few small tensors). Three schedules:
//   none    : backward, then every bucket allreduced, then the next forward
//   buckets : buckets allreduced as their gradients become ready (DDP-style);
//             the next forward starts when all are done
//   p3      : buckets that never span two layers, priority = layer, run in
//             slices, so a later, more urgent bucket preempts; the next
//             forward's layer i waits only for layer i's buckets (P3)
// Prints step times (mean of --steps after one warm-up step, rank 0) and
// ratios, and how much of the communication ran under backward compute.
//   px_bench_comm_engine [--ranks 4] [--gbps 1] [--layers 8] [--layer-mib 0.9] [--small-per-layer 4]
//                        [--forward-ms 5] [--backward-ms 10] [--bucket 2M] [--slice 256K]
//                        [--steps 5] [--busy] [--algorithm ring] [--sweep-buckets]
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "comm/backends.h"
#include "comm/engine/comm_engine.h"
#include "core/error.h"
#include "parallel/strategy.h"
#include "gradient_buckets.h"

namespace {

using namespace px::comm;
using namespace px::bench;

struct Config {
  int ranks = 4;
  double gbps = 1.0;
  int layers = 8;
  double layer_mib = 0.9;  // weight gradient per layer
  int small_per_layer = 4;  // small tensors per layer (biases, norms): 768 floats each
  double forward_ms = 5, backward_ms = 10;  // per layer
  int64_t bucket_bytes = px::parallel::kDefaultBucketBytes;  // the trainer's default
  int64_t slice_bytes = 256 << 10;
  int steps = 5;
  bool busy = false;
  bool sweep_buckets = false;
  Algorithm algorithm = Algorithm::ring;
};

enum class Schedule { none, buckets, p3 };
const char* schedule_name(Schedule s) {
  return s == Schedule::none ? "none" : s == Schedule::buckets ? "buckets" : "p3";
}

int64_t parse_size(const std::string& text) {
  double value = std::stod(text);
  char unit = text.back();
  if (unit == 'K' || unit == 'k') value *= 1024;
  if (unit == 'M' || unit == 'm') value *= 1 << 20;
  return static_cast<int64_t>(value);
}

void compute(double ms, bool busy) {
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::microseconds(static_cast<int64_t>(ms * 1000));
  if (!busy) return std::this_thread::sleep_until(until);
  volatile double x = 1;
  while (std::chrono::steady_clock::now() < until)
    for (int i = 0; i < 1000; ++i) x = x * 1.0000001 + 1e-9;
}

// Gradients in backward order: layer L-1's small tensors, its weight, ...,
// layer 0's. The arena is laid out in forward order (each layer: weight, then
// its small tensors), so backward walks it backwards.
struct Model {
  std::vector<GradientSlot> slots;
  int64_t elements = 0;
};
Model make_model(const Config& c) {
  const int64_t weight = static_cast<int64_t>(c.layer_mib * (1 << 20) / sizeof(float));
  const int64_t small = 768, per_layer = weight + c.small_per_layer * small;
  Model m;
  m.elements = c.layers * per_layer;
  for (int layer = c.layers - 1; layer >= 0; --layer) {
    const int64_t base = layer * per_layer;
    for (int k = c.small_per_layer - 1; k >= 0; --k)
      m.slots.push_back({fmt::format("l{}.s{}", layer, k), base + weight + k * small, small, layer});
    m.slots.push_back({fmt::format("l{}.w", layer), base, weight, layer});
  }
  return m;
}

struct Result {
  double step_ms = 0;
  double under_backward = 0;  // share of communication time inside backward
  double comm_ms = 0;         // communication per step (sum of slice times)
  int64_t rounds = 0;         // agreement rounds per step
};

// Length of the intersection of [a0, a1) with a union of sorted intervals.
double overlap(double a0, double a1, const std::vector<std::pair<double, double>>& spans) {
  double total = 0;
  for (auto [b0, b1] : spans) total += std::max(0.0, std::min(a1, b1) - std::max(a0, b0));
  return total;
}

Result run_schedule(const Config& c, Schedule schedule) {
  const Model model = make_model(c);
  Result result;
  InprocOptions options{.communicator = {}, .link_gbps = c.gbps};
  run_inproc(
      c.ranks,
      [&](Communicator& world) {
        EngineOptions engine_options{
            .slice_bytes = schedule == Schedule::p3 ? c.slice_bytes : 0,
            .trace = true,
            .collective = {.algorithm = c.algorithm}};
        CommEngine engine(world, engine_options);
        const int per_layer = c.small_per_layer + 1;  // tensors
        std::vector<float> arena(model.elements, 1.0f);
        GradientBuckets buckets(engine, arena, model.slots, c.bucket_bytes, Reduction::avg,
                                /*mix_priorities=*/schedule != Schedule::p3);
        std::vector<std::pair<double, double>> backward_spans;
        double start = 0;
        for (int step = 0; step <= c.steps; ++step) {
          if (step == 1) {
            barrier(world);
            start = now_us();
            engine.take_trace();
          }
          // Forward: layer i needs layer i's parameters, i.e. last step's gradients.
          for (int layer = 0; layer < c.layers; ++layer) {
            if (schedule == Schedule::p3 && step > 0)
              for (int t = 0; t < per_layer; ++t)
                buckets.wait_for(per_layer * (c.layers - 1 - layer) + t);
            compute(c.forward_ms, c.busy);
          }
          if (schedule == Schedule::p3 && step > 0) buckets.wait();
          const double backward_start = now_us();
          for (int layer = c.layers - 1; layer >= 0; --layer) {
            compute(c.backward_ms, c.busy);
            if (schedule != Schedule::none)
              for (int t = 0; t < per_layer; ++t)
                buckets.ready(per_layer * (c.layers - 1 - layer) + t);
          }
          if (step > 0) backward_spans.emplace_back(backward_start, now_us());
          if (schedule == Schedule::none)
            for (int i = 0; i < per_layer * c.layers; ++i) buckets.ready(i);
          if (schedule != Schedule::p3) buckets.wait();
        }
        if (schedule == Schedule::p3) buckets.wait();
        const double end = now_us();
        if (world.rank() != 0) return;
        result.step_ms = (end - start) / 1000.0 / c.steps;
        double comm = 0, under = 0;
        for (const TraceEvent& e : engine.take_trace()) {
          comm += e.duration_us;
          under += overlap(e.start_us, e.start_us + e.duration_us, backward_spans);
        }
        result.under_backward = comm > 0 ? under / comm : 0;
        result.comm_ms = comm / 1000.0 / c.steps;
        result.rounds = engine.agreement_rounds() / (c.steps + 1);
      },
      options);
  return result;
}

void compare(const Config& c) {
  const Model model = make_model(c);
  const double grad_mib = model.elements * 4.0 / (1 << 20);
  const double ring_ms = 2.0 * (c.ranks - 1) / c.ranks * grad_mib * (1 << 20) * 8 / (c.gbps * 1e9) * 1e3;
  fmt::print("# {} in-process ranks, link {} Gb/s, {} layers, {:.2f} MiB of gradients "
             "(ring allreduce of all: >= {:.0f} ms), forward {:.0f} ms, backward {:.0f} ms, "
             "compute by {}, bucket {} KiB, P3 slice {} KiB, {} allreduce\n",
             c.ranks, c.gbps, c.layers, grad_mib, ring_ms, c.forward_ms * c.layers,
             c.backward_ms * c.layers, c.busy ? "busy loops" : "sleeping", c.bucket_bytes >> 10,
             c.slice_bytes >> 10, algorithm_name(c.algorithm));
  Result none = run_schedule(c, Schedule::none);
  Result buckets = run_schedule(c, Schedule::buckets);
  Result p3 = run_schedule(c, Schedule::p3);
  fmt::print("{:<10} {:>10} {:>10} {:>14} {:>10} {:>22}\n", "schedule", "step ms", "vs none",
             "comm ms/step", "rounds", "comm under backward");
  for (auto [schedule, r] : {std::pair{Schedule::none, none}, std::pair{Schedule::buckets, buckets},
                             std::pair{Schedule::p3, p3}})
    fmt::print("{:<10} {:>10.1f} {:>10.2f} {:>14.1f} {:>10} {:>21.0f}%\n",
               schedule_name(schedule), r.step_ms, r.step_ms / none.step_ms, r.comm_ms, r.rounds,
               100 * r.under_backward);
  fmt::print("p3 / buckets: {:.2f}\n", p3.step_ms / buckets.step_ms);
}

void sweep_buckets(Config c) {
  fmt::print("# bucket size sweep, schedule buckets, link {} Gb/s, {} layers x {:.2f} MiB, "
             "forward {:.0f} ms, backward {:.0f} ms; step ms\n",
             c.gbps, c.layers, c.layer_mib, c.forward_ms * c.layers, c.backward_ms * c.layers);
  const std::vector<int64_t> sizes = {0, 64 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20,
                                      8 << 20, 32 << 20};
  fmt::print("{:>12}", "bucket KiB");
  for (int ranks : {2, 4}) fmt::print(" {:>10}", fmt::format("{} ranks", ranks));
  fmt::print("\n");
  for (int64_t size : sizes) {
    fmt::print("{:>12}", size == 0 ? std::string("per tensor") : std::to_string(size >> 10));
    for (int ranks : {2, 4}) {
      c.ranks = ranks;
      c.bucket_bytes = size;
      fmt::print(" {:>10.1f}", run_schedule(c, Schedule::buckets).step_ms);
      std::fflush(stdout);
    }
    fmt::print("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) px::fail("{} needs a value", arg);
        return argv[++i];
      };
      if (arg == "--ranks") c.ranks = std::stoi(value());
      else if (arg == "--gbps") c.gbps = std::stod(value());
      else if (arg == "--layers") c.layers = std::stoi(value());
      else if (arg == "--layer-mib") c.layer_mib = std::stod(value());
      else if (arg == "--small-per-layer") c.small_per_layer = std::stoi(value());
      else if (arg == "--forward-ms") c.forward_ms = std::stod(value());
      else if (arg == "--backward-ms") c.backward_ms = std::stod(value());
      else if (arg == "--bucket") c.bucket_bytes = parse_size(value());
      else if (arg == "--slice") c.slice_bytes = parse_size(value());
      else if (arg == "--steps") c.steps = std::stoi(value());
      else if (arg == "--busy") c.busy = true;
      else if (arg == "--algorithm") c.algorithm = algorithm_from_name(value());
      else if (arg == "--sweep-buckets") c.sweep_buckets = true;
      else px::fail("unknown argument '{}' (see the header of bench/comm_engine.cc)", arg);
    }
    if (c.sweep_buckets) sweep_buckets(c);
    else compare(c);
  } catch (const std::exception& error) {
    fmt::print(stderr, "error: {}\n", error.what());
    return 1;
  }
}
