#include "cli/precision_choice.h"

#include "core/error.h"
#include "kernels/cpu_features.h"

namespace px::cli {

std::vector<Precision> precisions_to_model(const std::string& word, const plan::ClusterSpec& cluster, bool compare) {
  if (!cluster.profile) {
    const bool bf16 = word == "bf16" || (word == "auto" && cluster.device.flops_bf16 > 0);
    if (!bf16) return {Precision::fp32};
    if (cluster.device.flops_bf16 <= 0)
      fail("--precision bf16: the cluster's {} has no bf16 FLOP/s (device.flops_bf16 is 0)", cluster.device.name);
    return {Precision::bf16};
  }
  const bool host_has_bf16 = cluster.profile->flops_bf16 > 0 && kernels::cpu_has_avx512_bf16();
  if (word == "auto") return compare && host_has_bf16 ? std::vector{Precision::fp32, Precision::bf16} : std::vector{Precision::fp32};
  if (word == "fp32") return {Precision::fp32};
  if (cluster.profile->flops_bf16 <= 0)
    fail("--precision bf16: the cluster '{}' has no bf16 GEMM rate (profile.flops_bf16 is 0): run parallax "
         "calibrate on a CPU with AVX512_BF16",
         cluster.name);
  kernels::require_avx512_bf16("--precision bf16 on --cluster " + cluster.name);
  return {Precision::bf16};
}

}  // namespace px::cli
