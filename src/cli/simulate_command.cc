// `parallax simulate`: a model and a strategy (the same flags as train and
// lower) replayed on a cluster (plan/simulate.h; one rank per pipeline
// stage unless --all-ranks) without running a kernel
// or allocating a weight (--precision as cli/precision_choice.h models it
// on the cluster): step time, throughput, bubble, peak memory per
// device against the device's memory, bytes per link class, and with
// --trace the replay as a Chrome trace whose events carry the instruction
// ids `parallax lower` prints; and what the prediction assumed for the
// largest GEMM, attention and collective (plan/assumptions.h).
#include <iostream>

#include "cli/commands.h"
#include "cli/local_cluster.h"
#include "cli/precision_choice.h"
#include "cli/train_flags.h"
#include "parallel/lower.h"
#include "plan/simulate.h"
#include "runtime/optimizer/optimizer.h"
#include "nn/build_model.h"
#include "runtime/executor/trace.h"
#include "runtime/train/trainer.h"

namespace px::cli {
namespace {

struct SimulateFlags {
  std::string cluster = "dgx-a100";
  std::string trace;
  bool all_ranks = false;
};

void write_trace(const std::string& path, const plan::Simulation& sim, int ranks) {
  std::vector<std::vector<TraceRecord>> per_rank(static_cast<size_t>(ranks));
  for (const plan::SimulatedEvent& e : sim.trace)
    per_rank[static_cast<size_t>(e.rank)].push_back(
        {.name = e.name,
         .lane = e.lane == "compute"                ? TraceRecord::Lane::compute
                 : e.lane.starts_with("progress:") ? TraceRecord::Lane::progress
                                                   : TraceRecord::Lane::comm,
         .start_us = e.start * 1e6,
         .duration_us = e.duration * 1e6,
         .bytes = 0,
         .step = 0,
         .instr = e.instr});
  write_chrome_trace(path, per_rank);
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  auto sim_flags = std::make_shared<SimulateFlags>();
  CLI::App* cmd = app.add_subcommand("simulate", "predict a strategy's step time and memory on a cluster");
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_flags(*cmd, *flags);
  add_parallel_flags(*cmd, *flags);
  cmd->add_option("--cluster", sim_flags->cluster,
                  "dgx-a100, dgx-h100 (optionally :NODES), local (this host, after parallax calibrate) or a cluster "
                  "JSON file")
      ->capture_default_str();
  cmd->add_option("--trace", sim_flags->trace, "write the simulated step as a Chrome trace");
  cmd->add_flag("--all-ranks", sim_flags->all_ranks,
                "replay every rank (default: one rank per pipeline stage, which the others mirror; the trace then "
                "holds those ranks)");
  flags->options.threads = 2;
  cmd->add_option("--threads", flags->options.threads,
                  "--cluster local: kernel threads of a lone rank, as train's (in-process ranks use 1 each)")
      ->capture_default_str();
  cmd->add_option("--link-gbps", flags->options.link_gbps,
                  "--cluster local: each in-process rank's link limited to X Gb/s, as train's (0: unlimited)")
      ->capture_default_str();
  flags->options.precision = "auto";
  flags->precision_flag = add_precision_option(
      *cmd, flags->options.precision,
      "bf16 where a preset's device has bf16 units (modelled GPU-style: bf16 compute and activations, fp32 "
      "master weights); on --cluster local fp32 (bf16 there is what train --precision bf16 runs)");
  cmd->callback([flags, sim_flags] {
    apply(*flags);
    TrainOptions& o = flags->options;
    if (o.strategy.mesh_ranks > 0) o.ranks = o.strategy.mesh_ranks;  // --mesh names the ranks
    if (o.ranks == 1) o.ranks = o.strategy.pipeline_parallel * o.strategy.context_parallel * o.strategy.tensor_parallel;
    const plan::ClusterSpec cluster = plan::cluster_named(sim_flags->cluster, local_cluster_path());
    const ModelledPrecision precision = precisions_to_model(o.precision, cluster, false).front();
    o.precision = precision.graph;
    validate(o);
    const nn::Model model = nn::build_model(o.model_config(), o.batch, true);
    const parallel::Strategy strategy = strategy_for(o, model, o.ranks);
    const parallel::LowerRequest lowering{.forward = &model.graph, .loss = model.loss,
                                          .collective = o.strategy.collective, .bucket_buffers = o.strategy.bucket_buffers};
    const std::vector<parallel::Program> programs = sim_flags->all_ranks
                                                        ? plan::lower_all(lowering, strategy)
                                                        : plan::lower_representatives(lowering, strategy);
    const DType compute = precision.compute;
    // On the local spec: in-process ranks of one kernel thread each, as train runs them, sharing the cores.
    const plan::RooflineEstimator roofline(cluster, compute);
    const plan::Simulation sim = plan::simulate_sharing_cores(
        {.programs = &programs,
         .cluster = &cluster,
         .estimator = &roofline,
         .execution = {.overlap = o.overlap, .trace = !sim_flags->trace.empty()},
         .optimizer_slots = static_cast<int>(optimizer_slot_names(o.optimizer.kind).size()),
         .compute = compute},
        {.threads = o.ranks > 1 ? 1 : o.threads, .link_gbps = o.link_gbps,
         .collective = o.strategy.collective});
    const int devices = strategy.mesh.ranks();
    std::cout << fmt::format("simulated mesh {} on {} ({} of {} {} devices, {} a node), {}\n", strategy.mesh.str(),
                             sim_flags->cluster, devices, cluster.devices(), cluster.device.name,
                             cluster.devices_per_node, precision.word == "bf16" ? "bf16 mixed precision" : "fp32");
    const double rows = static_cast<double>(o.batch);
    const int64_t positions = nn::positions_per_row(model);
    const double units = rows * static_cast<double>(positions);
    std::cout << fmt::format("step {:.4f} s; {:.0f} {}/s; bubble {:.1f}%\n", sim.step_seconds,
                             units / sim.step_seconds, positions > 1 ? "tokens" : "samples",
                             100 * sim.bubble_fraction);
    double peak = 0;
    size_t at = 0;
    for (size_t r = 0; r < programs.size(); ++r)
      if (sim.peak_bytes[r] > peak) peak = sim.peak_bytes[at = r];
    std::cout << fmt::format("peak memory {:.3f} GB on rank {} of {:.0f} GB a device{}; of it forward activations "
                             "{:.3f} GB\n",
                             peak / 1e9, programs[at].rank, cluster.device.memory_bytes / 1e9,
                             peak > cluster.device.memory_bytes ? " -- does not fit" : "",
                             sim.activation_peak_bytes[at] / 1e9);
    for (const auto& [link, bytes] : sim.bytes_sent)
      std::cout << fmt::format("bytes sent per step, {}: {:.3f} GB\n", plan::link_class_name(link), bytes / 1e9);
    std::cout << fmt::format("hardware FLOP utilisation {:.1f}% (executed FLOPs over step x devices x {} peak)\n",
                             100 * sim.flops / (sim.step_seconds * devices * cluster.device.flops(precision.peak)),
                             precision.peak == DType::bf16 ? "bf16" : "f32");
    if (const std::string assumed = plan::describe(sim.assumed); !assumed.empty())
      std::cout << "assumed for the step's largest pieces (why the step takes what it does):\n" << assumed;
    if (!sim_flags->trace.empty()) {
      write_trace(sim_flags->trace, sim, devices);
      std::cout << fmt::format("wrote the simulated step to '{}' (open it in https://ui.perfetto.dev)\n",
                               sim_flags->trace);
    }
  });
}

}  // namespace px::cli
