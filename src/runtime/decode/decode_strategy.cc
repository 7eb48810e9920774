#include "runtime/decode/decode_strategy.h"

#include <numeric>

#include "core/error.h"
#include "nn/gpt_decode.h"
#include "parallel/compose.h"

namespace px::decode {

const std::vector<std::string>& decode_batch_inputs() {
  static const std::vector<std::string> names = {"tokens", "positions", "segments"};
  return names;
}

void check_tensor_parallel(const nn::GptConfig& config, int tp) {
  if (tp < 1) fail("decode: tensor-parallel ranks {} must be >= 1", tp);
  if (config.n_head % tp != 0)
    fail("--tp {} does not divide n_head={}: each tensor-parallel rank computes and caches whole attention heads "
         "(try --tp {})",
         tp, config.n_head, std::gcd(static_cast<int64_t>(tp), config.n_head));
}

parallel::Strategy decode_strategy(const Graph& decode_graph, const nn::GptConfig& config, int tp) {
  check_tensor_parallel(config, tp);
  if (tp == 1) return parallel::data_parallel(1, decode_batch_inputs());
  parallel::Strategy strategy = parallel::tensor_parallel(decode_graph, 1, tp, decode_batch_inputs(), false);
  for (int64_t layer = 0; layer < config.n_layer; ++layer)
    strategy.seeds.push_back({nn::kv_cache_name(layer), "tp", Placement::S(2)});
  return strategy;
}

}  // namespace px::decode
