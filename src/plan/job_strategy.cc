#include "plan/job_strategy.h"

#include <numeric>

#include "core/error.h"
#include "parallel/row_split.h"

namespace px::plan {

void validate_split(const nn::ModelConfig& model, const parallel::StrategyRequest& request, int ranks,
                    int64_t batch) {
  const int tp = request.tensor_parallel, pp = request.pipeline_parallel, cp = request.context_parallel;
  const int ep = request.expert_parallel;
  if (tp < 1) fail("--tp {} must be >= 1", tp);
  if (pp < 1) fail("--pp {} must be >= 1", pp);
  if (cp < 1) fail("--cp {} must be >= 1", cp);
  if (ep < 1) fail("--ep {} must be >= 1", ep);
  if (request.micro_batches <= 0) fail("micro-batches (gradient accumulation) {} must be >= 1", request.micro_batches);
  if (request.bucket_bytes < 0) fail("bucket size {} bytes must be >= 0", request.bucket_bytes);
  if (ranks < 1) fail("ranks {} must be >= 1", ranks);
  if (batch <= 0) fail("batch size {} must be positive", batch);
  if (ranks % (tp * pp * ep * cp) != 0)
    fail("--pp {} x --ep {} x --cp {} x --tp {} does not divide the {} ranks: the mesh is {{pp: pp, dp: ranks / "
         "(pp ep cp tp), ep: ep, cp: cp, tp: tp}}",
         pp, ep, cp, tp, ranks);
  // The rows are split over the data ranks and each one's expert ranks.
  const int dp = ranks / (tp * pp * cp * ep) * ep;
  if (batch < dp)
    fail("batch size {} is smaller than the {} data-parallel{} ranks: expected at least one row a rank", batch, dp,
         ep > 1 ? " x expert" : "");
  // Every expert rank takes part in every micro-batch's exchanges (its
  // experts serve the other ranks' rows): none may be without rows.
  if (ep > 1 && batch < static_cast<int64_t>(dp) * request.micro_batches)
    fail("batch size {} leaves a micro-batch without rows on some of the {} data-parallel x expert ranks with {} "
         "micro-batches: every expert rank joins every micro-batch's exchanges, so expected a batch of at least {} "
         "(or fewer micro-batches)",
         batch, dp, request.micro_batches, static_cast<int64_t>(dp) * request.micro_batches);
  if (ep > 1 && model.kind == "gpt" && model.gpt.moe_experts < ep)
    fail("--ep {} needs a mixture of experts of at least {} experts (each expert rank holds a block of them): the "
         "model has --moe-experts {}",
         ep, ep, model.gpt.moe_experts);
  if (!request.row_shares.empty() && request.strategy_file.empty()) {
    parallel::check_row_shares(request.row_shares, dp, "--row-shares");
    for (int r = 0; r < dp; ++r)
      if (parallel::shard_rows(batch, r, dp, request.row_shares).size() == 0)
        fail("--row-shares gives data rank {} no rows of a {}-row batch: raise its share or the batch", r, batch);
  }
  if (tp <= 1 && !request.sequence_parallel) return;
  if (model.kind == "gpt" && model.gpt.n_head % tp != 0)
    fail("--tp {} does not divide n_head={}: each tensor-parallel rank computes whole attention heads (try --tp "
         "{} or --heads {})",
         tp, model.gpt.n_head, std::gcd(static_cast<int64_t>(tp), model.gpt.n_head),
         tp * ((model.gpt.n_head + tp - 1) / tp));
  if (request.sequence_parallel && model.kind != "gpt" && !nn::is_onnx_path(model.kind))
    fail("--sequence-parallel needs a sequence: the gpt model or a transformer imported from ONNX");
}

parallel::Strategy strategy_for(const parallel::StrategyRequest& request, const nn::Model& model, int ranks,
                                RunUse use) {
  return parallel::compose(request, {.graph = &model.graph,
                                     .batch_inputs = batch_input_names(model),
                                     .ranks = ranks,
                                     .grad_clip = use.grad_clip,
                                     .sgd_momentum = use.sgd_momentum});
}

parallel::LowerRequest lower_request(const nn::Model& model, const parallel::StrategyRequest& request) {
  return {.forward = &model.graph,
          .loss = model.loss,
          .reported = reported_values(model),
          .collective = request.collective,
          .bucket_buffers = request.bucket_buffers};
}

std::vector<ValueId> reported_values(const nn::Model& model) {
  std::vector<ValueId> values;
  for (const nn::RouterValues& r : model.routers)
    if (r.stats != kNoValue) values.push_back(r.stats);
  return values;
}

}  // namespace px::plan
