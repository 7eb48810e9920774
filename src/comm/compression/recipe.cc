#include "comm/compression/recipe.h"

#include <cmath>

namespace px::comm::compression {

double gathered_payload_bytes(const Spec& codec, double floats) {
  const double chunks = std::ceil(floats / 256);
  switch (codec.method) {
    case Method::int8: return floats + 4 * chunks;
    case Method::sign: return std::ceil(floats / 8) + 4 * chunks;
    case Method::topk:
    case Method::threshold: {
      const double fraction = codec.method == Method::topk ? codec.topk_fraction : 0.01;
      return 8 + 3.3 * std::round(fraction * floats);
    }
    default: return 0;
  }
}

std::vector<CodecStep> codec_recipe(const Spec& codec, double floats, int64_t rows, int64_t cols, int ranks) {
  switch (codec.method) {
    case Method::none: return {{.collective = Collective::allreduce, .bytes = 4 * floats}};
    case Method::fp16:
    case Method::bf16: return {{.collective = Collective::allreduce, .bytes = 2 * floats}};
    case Method::powersgd: {
      const double r = codec.rank;
      return {{.collective = Collective::allreduce, .bytes = 4 * r * static_cast<double>(rows), .ring = true},
              {.collective = Collective::allreduce, .bytes = 4 * r * static_cast<double>(cols), .ring = true}};
    }
    default:
      return {{.collective = Collective::allgather,
               .bytes = ranks * gathered_payload_bytes(codec, floats),
               .gathered = true}};
  }
}

}  // namespace px::comm::compression
