#include "runtime/train/memory_report.h"

#include <fmt/format.h>

#include "parallel/memory_ledger.h"

namespace px {

namespace {

RankMemory expected(int zero_stage, int ranks, int slots, int64_t parameters) {
  const parallel::StateBytes s = parallel::state_bytes(static_cast<double>(parameters), zero_stage, ranks, slots);
  return {.parameters = s.parameters, .gradients = s.gradients, .optimizer_state = s.optimizer_state};
}

}  // namespace

std::string describe_rank_memory(int zero_stage, int ranks, int slots, int64_t parameters,
                                 const RankMemory& measured) {
  const RankMemory ledger = expected(zero_stage, ranks, slots, parameters);
  const RankMemory unsharded = expected(0, ranks, slots, parameters);
  auto mib = [](double bytes) { return bytes / (1 << 20); };
  const char* params = zero_stage >= 3 && ranks > 1 ? "4Ψ/p" : "4Ψ";
  const char* grads = zero_stage == 0 || ranks <= 1 ? "4Ψ" : zero_stage == 1 ? "4Ψ+4Ψ/p" : "4Ψ/p";
  const char* state = zero_stage == 0 || ranks <= 1 ? "4KΨ" : "4KΨ/p";
  return fmt::format(
      "memory per rank (ZeRO-{}, p = {}, Ψ = {} parameters, K = {} optimizer slots): parameters {:.2f} MiB "
      "({} = {:.2f}), gradients {:.2f} MiB ({} = {:.2f}), optimizer state {:.2f} MiB ({} = {:.2f}); "
      "total {:.2f} MiB, {:.2f} MiB without sharding",
      zero_stage, ranks, parameters, slots, mib(measured.parameters), params, mib(ledger.parameters),
      mib(measured.gradients), grads, mib(ledger.gradients), mib(measured.optimizer_state), state,
      mib(ledger.optimizer_state), mib(measured.total()), mib(unsharded.total()));
}

std::string describe_tensor_parallel_share(const TensorParallelShare& s, int64_t measured) {
  return fmt::format(
      "tensor parallel over T = {}: Ψ_T = Ψ_split/T + Ψ_replicated = {}/{} + {} = {:.0f} parameters per rank "
      "(measured {}; {:.3f} of the whole model's {})",
      s.ranks, s.split, s.ranks, s.replicated, s.per_rank(), measured,
      static_cast<double>(measured) / static_cast<double>(s.split + s.replicated), s.split + s.replicated);
}

}  // namespace px
