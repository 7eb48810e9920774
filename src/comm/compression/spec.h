// Spec: which gradient compression a data-parallel allreduce uses, parsed
// once from the command line ("topk:0.01", "powersgd:2,ef=off", ...). Plain
// value type: equal specs on every rank are required (GradientCompressor
// checks this on its first call).
#pragma once

#include <string>
#include <string_view>

namespace px::comm::compression {

enum class Method {
  none,       // float32 ring allreduce
  fp16,       // IEEE half payload, ring allreduce reduced in float32 per element
  bf16,       // bfloat16 payload, likewise
  int8,       // per-chunk scale + int8 with stochastic rounding, allgathered
  sign,       // 1 bit per element + per-chunk mean |x|, allgathered
  topk,       // k = fraction · n largest |x|, sparse (index, value) exchange
  threshold,  // every |x| >= threshold, sparse exchange with per-rank counts
  powersgd,   // rank-r low-rank approximation P·Q^T (Vogels et al. 2019)
};

std::string_view method_name(Method method);

struct Spec {
  Method method = Method::none;
  double topk_fraction = 0.01;  // topk: in (0, 1]
  float threshold = 1e-3f;      // threshold: > 0
  int rank = 2;                 // powersgd: >= 1
  // Compress (gradient + residual) and keep what was not sent as the next
  // residual. Ignored for none (nothing is lost).
  bool error_feedback = true;

  // Grammar: method[:parameter][,ef=on|off]
  //   none | fp16 | bf16 | int8 | sign | topk:F | threshold:T | powersgd:R
  // Throws px::Error naming the bad text and what was expected.
  static Spec parse(std::string_view text);
  // The canonical text parse() accepts: parse(s.to_string()) == s.
  std::string to_string() const;
  // Whether the method loses information (and error feedback applies).
  bool lossy() const { return method != Method::none; }
  bool operator==(const Spec&) const = default;
};

}  // namespace px::comm::compression
