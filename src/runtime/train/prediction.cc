#include "runtime/train/prediction.h"

#include <filesystem>

#include "core/error.h"
#include "runtime/calibrate/calibrate.h"
#include "plan/simulate.h"

namespace px {

plan::ClusterSpec local_cluster(const std::string& path, int ranks, bool* calibrated) {
  *calibrated = std::filesystem::exists(path);
  if (*calibrated) return plan::load_cluster(path);
  plan::HostProfile profile;
  // A quick look at the end of a run, not a calibration: measured once.
  measure_host(profile,
               {.batch_seconds = 0.005, .batches = 1, .max_ranks = std::max(1, ranks), .contention_attempts = 1});
  profile.comm = comm::default_cost_model("inproc");
  return plan::local_cluster_spec(std::move(profile), "this host's CPU", 1e12, {.ranks_per_host = std::max(64, ranks)});
}

RunPrediction predict_run(const RunAsRan& o, const std::vector<parallel::Program>& programs) {
  const int ranks = static_cast<int>(programs.size());
  RunPrediction out;
  plan::ClusterSpec cluster = local_cluster(o.local_cluster, ranks, &out.calibrated);
  if (!o.mpi && cluster.nodes > 1) {
    // Calibrated across hosts under mpirun, predicting in-process ranks:
    // they all sit on this host and talk over its own transport.
    cluster.devices_per_node = std::max(cluster.devices(), ranks);
    cluster.nodes = 1;
    cluster.inter_node = cluster.intra_node;
    cluster.nodes_share_cores = false;
    cluster.node_devices.clear();  // the hosts' speeds: this host runs at the profile's
  } else if (cluster.devices() < ranks) {
    // Calibrated with fewer ranks a host than this run placed on them: the
    // same hosts, more ranks on each (they share its cores, as profiled).
    cluster.devices_per_node = (ranks + cluster.nodes - 1) / cluster.nodes;
  }
  out.basis = out.calibrated ? fmt::format("the local spec '{}'", o.local_cluster)
                             : "this host's probed rates, kernels at their roofline (run 'parallax calibrate' for a "
                               "calibrated prediction)";
  // A bf16 run on a spec saved without a bf16 rate: the rate probed now.
  if (o.bf16 && cluster.profile && cluster.profile->flops_bf16 <= 0) {
    cluster.profile->flops_bf16 = cluster.device.flops_bf16 =
        measure_bf16_gemm_rate({.batch_seconds = 0.005, .batches = 1});
    out.basis += " with the bf16 GEMM rate probed now (calibrate again to keep one)";
  }
  const plan::Simulation sim = plan::simulate_sharing_cores(
      {.programs = &programs,
       .cluster = &cluster,
       .execution = {.overlap = o.overlap, .trace = true},
       .optimizer_slots = o.optimizer_slots},
      {.threads = o.threads, .link_gbps = o.link_gbps, .collective = o.collective});
  out.step_seconds = sim.step_seconds;
  out.peak_bytes = sim.peak_bytes.front();
  out.activation_peak_bytes = sim.forward_activation_peak_bytes.front();
  out.peak_bytes_per_rank = sim.peak_bytes;
  out.timeline = sim.trace;
  out.assumed = sim.assumed;
  return out;
}

std::string describe_prediction(const RunPrediction& p, double measured_step, double measured_peak,
                                double measured_activations) {
  auto error = [](double predicted, double measured) {
    return measured > 0 ? fmt::format("{:+.1f}%", 100 * (predicted / measured - 1)) : std::string("n/a");
  };
  constexpr double kMiB = 1 << 20;
  return fmt::format(
      "predicted vs measured (from {}):\n"
      "  step time    predicted {:.4f} s, measured {:.4f} s (the executor's run, median of the steps after the first): {}\n"
      "  peak memory  predicted {:.1f} MiB, measured {:.1f} MiB (rank 0's tensors): {}\n"
      "  activations  predicted {:.1f} MiB, measured {:.1f} MiB (rank 0's forward activations at their peak): {}\n",
      p.basis, p.step_seconds, measured_step, error(p.step_seconds, measured_step), p.peak_bytes / kMiB,
      measured_peak / kMiB, error(p.peak_bytes, measured_peak), p.activation_peak_bytes / kMiB,
      measured_activations / kMiB, error(p.activation_peak_bytes, measured_activations)) +
         (p.assumed.gemm || p.assumed.collective ? "  assumed for the step's largest pieces:\n" +
                                                       plan::describe(p.assumed, "    ")
                                                 : std::string());
}

}  // namespace px
