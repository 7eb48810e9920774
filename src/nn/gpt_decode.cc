#include "nn/gpt_decode.h"

#include <fmt/format.h>

#include "nn/gpt_blocks.h"
#include "nn/layers.h"

namespace px::nn {

int64_t block_table_entries(const GptConfig& config, int64_t block_tokens) {
  return (config.block + block_tokens - 1) / block_tokens;
}

std::string kv_cache_name(int64_t layer) { return fmt::format("h.{}.attn.kv_cache", layer); }

DecodeModel build_gpt_decode(const GptConfig& c, const DecodeShape& s) {
  validate(c);
  if (s.tokens < 1) fail("decode: {} tokens in an iteration; it needs at least one", s.tokens);
  if (s.cache_blocks < 1 || s.block_tokens < 1)
    fail("decode: a KV cache of {} blocks of {} tokens", s.cache_blocks, s.block_tokens);
  const int64_t N = s.tokens, H = c.n_head, D = c.n_embd / c.n_head;
  DecodeModel m;
  Graph& g = m.graph;
  m.tokens = g.input("tokens", {Shape{N}, DType::i32});
  m.positions = g.input("positions", {Shape{N}, DType::i32});
  m.segments = g.input("segments", {Shape{N, 3 + block_table_entries(c, s.block_tokens)}, DType::i32});
  ValueId wte = g.param("wte.weight", {Shape{c.vocab, c.n_embd}}, {ParamInit::Kind::normal, 0.02}, true);
  ValueId wpe = g.param("wpe.weight", {Shape{c.block, c.n_embd}}, {ParamInit::Kind::normal, 0.02}, true);
  std::vector<ValueId> caches;
  for (int64_t i = 0; i < c.n_layer; ++i) {
    m.caches.push_back(kv_cache_name(i));
    caches.push_back(g.param(m.caches.back(), {Shape{s.cache_blocks, 2, H, s.block_tokens, D}}, {}, false));
  }
  detail::GptBlocks b{.config = c, .g = g, .lead = {N}, .tokens = N, .training = false,
                      .attend = [&](ValueId qkv, int64_t layer) {
                        m.qkv.push_back(qkv);
                        return g.add1("paged_attention", {qkv, caches[static_cast<size_t>(layer)], m.segments}, {},
                                      "attention");
                      }};
  ValueId tok = g.add1("embedding", {m.tokens, wte}, {}, "wte");     // (N, C)
  ValueId pos = g.add1("embedding", {m.positions, wpe}, {}, "wpe");  // (N, C)
  ValueId x = g.add1("add", {tok, pos}, {}, "embed");
  for (int64_t i = 0; i < c.n_layer; ++i) x = b.block(x, i);
  x = layer_norm(g, "ln_f", x, c.n_embd);
  m.logits = g.add1("matmul", {x, wte}, {{"trans_b", int64_t{1}}}, "lm_head");  // (N, V)
  return m;
}

}  // namespace px::nn
