// `parallax simulate`: a model and a strategy (the same flags as train and
// lower) replayed on a cluster (plan/simulate.h; one rank per pipeline
// stage unless --all-ranks) without running a kernel
// or allocating a weight (--precision as cli/precision_choice.h models it
// on the cluster): step time, throughput, bubble, peak memory per
// device against the device's memory, bytes per link class, and with
// --trace the replay as a Chrome trace whose events carry the instruction
// ids `parallax lower` prints; and what the prediction assumed for the
// largest GEMM, attention and collective (plan/assumptions.h).
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/local_cluster.h"
#include "cli/precision_choice.h"
#include "cli/train_flags.h"
#include "parallel/lower.h"
#include "plan/published_checks.h"
#include "plan/simulate.h"
#include "runtime/optimizer/optimizer.h"
#include "nn/build_model.h"
#include "plan/chrome_trace.h"
#include "plan/job_strategy.h"

namespace px::cli {
namespace {

struct SimulateFlags {
  std::string cluster = "dgx-a100";
  std::string trace;
  bool all_ranks = false;
  double expert_imbalance = 1.0;
  std::string expert_load;  // a run directory or its metrics.jsonl
  std::string attention_kernel;  // empty: the cluster's
};

// The measured imbalance of a run: its last step's "moe" load (the metrics
// line, docs/moe.md), the busiest expert rank of the worst layer over
// `ranks` expert ranks (plan::expert_imbalance).
double measured_imbalance(const std::string& where, int ranks) {
  const std::string path = std::filesystem::is_directory(where) ? where + "/metrics.jsonl" : where;
  std::ifstream in(path);
  if (!in) fail("--expert-load '{}': cannot read '{}' (a run directory or its metrics.jsonl)", where, path);
  nlohmann::json last;
  for (std::string line; std::getline(in, line);)
    if (line.find("\"moe\"") != std::string::npos) last = nlohmann::json::parse(line, nullptr, false);
  if (last.is_discarded() || !last.contains("moe"))
    fail("--expert-load '{}': no step in '{}' reports a mixture of experts' load (\"moe\")", where, path);
  double worst = 1.0;
  for (const nlohmann::json& layer : last.at("moe")) {
    const std::vector<double> load = layer.at("load").get<std::vector<double>>();
    if (static_cast<int>(load.size()) < ranks)
      fail("--expert-load '{}': a layer of {} experts cannot spread over {} expert ranks", where, load.size(), ranks);
    worst = std::max(worst, plan::expert_imbalance(load, ranks));
  }
  return worst;
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
  cmd->add_option("--attention-kernel", sim_flags->attention_kernel,
                  "the GPU attention kernel the replay costs, at its measured rates (plan/presets.cc): flash "
                  "(FlashAttention-2, the presets' default) or standard (the T x T scores written and passed over "
                  "apart, as Megatron-LM's 2021-22 runs)")
      ->check(CLI::IsMember({"flash", "standard"}));
  cmd->add_flag("--all-ranks", sim_flags->all_ranks,
                "replay every rank (default: one rank per pipeline stage, which the others mirror; the trace then "
                "holds those ranks)");
  cmd->add_option("--expert-imbalance", sim_flags->expert_imbalance,
                  "--ep: the rows the busiest expert rank receives over an even routing's (1: even; a run's "
                  "metrics give it from the measured load, docs/moe.md): its exchanges and experts' GEMMs take that "
                  "much longer, and every rank waits for it")
      ->check(CLI::Range(1.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--expert-load", sim_flags->expert_load,
                  "--ep: the imbalance measured by a run (its directory or metrics.jsonl): the last step's expert "
                  "load, its worst layer's busiest expert rank (instead of --expert-imbalance)");
  flags->job.run.threads = 2;
  cmd->add_option("--threads", flags->job.run.threads,
                  "--cluster local: kernel threads of a lone rank, as train's (in-process ranks use 1 each)")
      ->capture_default_str();
  cmd->add_option("--link-gbps", flags->job.launch.link_gbps,
                  "--cluster local: each in-process rank's link limited to X Gb/s, as train's (0: unlimited)")
      ->capture_default_str();
  flags->precision = "auto";
  flags->precision_flag = add_precision_option(
      *cmd, flags->precision,
      "bf16 where a preset's device has bf16 units; on --cluster local fp32 (either way the Program simulated is "
      "the one train --precision runs: bf16 GEMMs and attention, the values only they read in bf16)");
  cmd->callback([flags, sim_flags] {
    apply(*flags);
    JobSpec& o = flags->job;
    if (o.strategy.mesh_ranks > 0) o.launch.ranks = o.strategy.mesh_ranks;  // --mesh names the ranks
    if (o.launch.ranks == 1) o.launch.ranks = o.strategy.pipeline_parallel * o.strategy.expert_parallel * o.strategy.context_parallel *
                                                 o.strategy.tensor_parallel;
    double imbalance = sim_flags->expert_imbalance;
    if (!sim_flags->expert_load.empty()) {
      if (imbalance != 1.0) fail("--expert-load and --expert-imbalance both give the imbalance: choose one");
      imbalance = measured_imbalance(sim_flags->expert_load, std::max(o.strategy.expert_parallel, 1));
      std::cout << fmt::format("expert imbalance {:.3f}, measured by '{}'\n", imbalance, sim_flags->expert_load);
    }
    plan::ClusterSpec cluster = plan::cluster_named(sim_flags->cluster, local_cluster_path());
    if (!sim_flags->attention_kernel.empty())
      cluster = plan::with_attention_kernel(std::move(cluster), sim_flags->attention_kernel);
    const Precision precision = precisions_to_model(flags->precision, cluster, false).front();
    o.strategy.precision = precision;
    nn::validate(o.model);
    plan::validate_split(o.model, o.strategy, o.launch.ranks, o.data.batch);
    const nn::Model model = nn::build_model(o.model, o.data.batch, true);
    const parallel::Strategy strategy = plan::strategy_for(o.strategy, model, o.launch.ranks, run_use(o.optimizer));
    const parallel::LowerRequest lowering = plan::lower_request(model, o.strategy);
    const std::vector<parallel::Program> programs = sim_flags->all_ranks
                                                        ? plan::lower_all(lowering, strategy)
                                                        : plan::lower_representatives(lowering, strategy, nullptr,
                                                                                      cluster.heterogeneous());
    // On the local spec: in-process ranks of one kernel thread each, as train runs them, sharing the cores.
    const plan::Simulation sim = plan::simulate_sharing_cores(
        {.programs = &programs,
         .cluster = &cluster,
         .execution = {.overlap = o.run.overlap, .trace = !sim_flags->trace.empty()},
         .optimizer_slots = static_cast<int>(optimizer_slot_names(o.optimizer.update.kind).size()),
         .expert_imbalance = imbalance},
        {.threads = o.launch.ranks > 1 ? 1 : o.run.threads, .link_gbps = o.launch.link_gbps,
         .collective = o.strategy.collective});
    const int devices = strategy.mesh.ranks();
    const DType peak_dtype = precision == Precision::bf16 ? DType::bf16 : DType::f32;
    std::cout << fmt::format("simulated mesh {} on {} ({} of {} {} devices, {} a node), {}\n", strategy.mesh.str(),
                             sim_flags->cluster, devices, cluster.devices(), cluster.device.name,
                             cluster.devices_per_node, precision == Precision::bf16 ? "bf16 mixed precision" : "fp32");
    const double rows = static_cast<double>(o.data.batch);
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
                             100 * sim.flops / (sim.step_seconds * devices * cluster.device.flops(peak_dtype)),
                             peak_dtype == DType::bf16 ? "bf16" : "f32");
    if (const std::string assumed = plan::describe(sim.assumed); !assumed.empty())
      std::cout << "assumed for the step's largest pieces (why the step takes what it does):\n" << assumed;
    // On a GPU preset: how far off the simulator was on the published runs nearest this one's shape.
    if (!cluster.profile.has_value()) {
      const plan::RunShape shape =
          plan::run_shape(strategy, devices, static_cast<double>(model.graph.param_count()), cluster.name);
      std::cout << "checked against published runs of similar shape (bench/published_runs.json, the development "
                   "set, and bench/published_heldout.json, scored once; docs/planner.md):\n"
                << plan::describe_checked(plan::nearest_checked_runs(shape));
    }
    if (!sim_flags->trace.empty()) {
      plan::write_simulated_trace(sim_flags->trace, sim, devices);
      std::cout << fmt::format("wrote the simulated step to '{}' (open it in https://ui.perfetto.dev)\n",
                               sim_flags->trace);
    }
  });
}

}  // namespace px::cli
