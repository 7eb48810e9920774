#include "kernels/moe.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace px::kernels {

namespace {

// Row n's softmax, in a fixed order of operations: the same bits for a row
// whatever the other rows are (the router is never split, and must route
// alike under every strategy).
void softmax_row(int64_t E, const float* x, float* y) {
  float max = x[0];
  for (int64_t e = 1; e < E; ++e) max = std::max(max, x[e]);
  float sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += y[e] = std::exp(x[e] - max);
  for (int64_t e = 0; e < E; ++e) y[e] /= sum;
}

}  // namespace

void moe_router_logits(int64_t rows, int64_t C, int64_t E, const float* x, const float* w, float* logits) {
  for (int64_t n = 0; n < rows; ++n) {
    float* out = logits + n * E;
    std::fill(out, out + E, 0.0f);
    for (int64_t c = 0; c < C; ++c) {
      const float xc = x[n * C + c];
      const float* wc = w + c * E;
      for (int64_t e = 0; e < E; ++e) out[e] += xc * wc[e];
    }
  }
}

void moe_route(const RouteShape& s, const float* logits, const float* bias, int32_t* choice, float* gates,
               float* counts) {
  const int64_t N = s.rows, E = s.experts, k = s.k;
  PX_CHECK(k >= 1 && k <= E, "moe_route: k={} of {} experts", k, E);
  std::vector<float> probs(static_cast<size_t>(E));
  const float* p = probs.data();
  for (int64_t n = 0; n < N; ++n) {
    softmax_row(E, logits + n * E, probs.data());
    int32_t* c = choice + n * k;
    float* g = gates + n * k;
    float total = 0;
    for (int64_t j = 0; j < k; ++j) {
      int32_t best = -1;
      float best_score = 0;
      for (int64_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken = taken || c[i] == e;
        if (taken) continue;
        const float score = p[e] + (bias ? bias[e] : 0.0f);
        if (best < 0 || score > best_score) best = static_cast<int32_t>(e), best_score = score;
      }
      c[j] = best;
      g[j] = p[best];
      total += p[best];
      counts[best] += 1;
    }
    if (s.normalize)
      for (int64_t j = 0; j < k; ++j) g[j] /= total;
  }
  if (s.capacity <= 0) return;
  std::vector<int64_t> taken(static_cast<size_t>(E), 0);
  for (int64_t j = 0; j < k; ++j)
    for (int64_t n = 0; n < N; ++n) {
      int32_t& c = choice[n * k + j];
      if (taken[static_cast<size_t>(c)]++ >= s.capacity) c = -1 - c;
    }
}

void moe_route_backward(const RouteShape& s, const float* logits, const int32_t* choice, const float* gates,
                        const float* dgates, float* dlogits) {
  const int64_t N = s.rows, E = s.experts, k = s.k;
  std::vector<float> probs(static_cast<size_t>(E)), dp(static_cast<size_t>(E));
  const float* p = probs.data();
  for (int64_t n = 0; n < N; ++n) {
    softmax_row(E, logits + n * E, probs.data());
    std::fill(dp.begin(), dp.end(), 0.0f);
    const int32_t* c = choice + n * k;
    const float* g = gates + n * k;
    const float* dg = dgates + n * k;
    // g_j = p_{e_j} / S (S the chosen probs' sum, or 1):
    // dL/dp_e = [e chosen] (dg_j(e) - sum_j dg_j g_j [normalize]) / S.
    float total = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j) total += p[chosen_expert(c[j])], dot += dg[j] * g[j];
    const float S = s.normalize ? total : 1.0f;
    for (int64_t j = 0; j < k; ++j)
      dp[static_cast<size_t>(chosen_expert(c[j]))] += (dg[j] - (s.normalize ? dot : 0.0f)) / S;
    float inner = 0;
    for (int64_t e = 0; e < E; ++e) inner += p[e] * dp[static_cast<size_t>(e)];
    for (int64_t e = 0; e < E; ++e) dlogits[n * E + e] = p[e] * (dp[static_cast<size_t>(e)] - inner);
  }
}

double moe_balance_loss(int64_t rows, int64_t E, const float* logits, const float* share) {
  std::vector<float> p(static_cast<size_t>(E));
  double total = 0;
  for (int64_t n = 0; n < rows; ++n) {
    softmax_row(E, logits + n * E, p.data());
    for (int64_t e = 0; e < E; ++e) total += double(share[e]) * p[static_cast<size_t>(e)];
  }
  return total;
}

void moe_balance_loss_backward(int64_t rows, int64_t E, const float* logits, const float* share, float scale,
                               float* dlogits) {
  std::vector<float> p(static_cast<size_t>(E));
  for (int64_t n = 0; n < rows; ++n) {
    softmax_row(E, logits + n * E, p.data());
    float inner = 0;
    for (int64_t e = 0; e < E; ++e) inner += p[static_cast<size_t>(e)] * share[e];
    for (int64_t e = 0; e < E; ++e) dlogits[n * E + e] = scale * p[static_cast<size_t>(e)] * (share[e] - inner);
  }
}

int64_t ExpertRows::largest() const {
  int64_t most = 0;
  for (int64_t e = 0; e + 1 < static_cast<int64_t>(offset.size()); ++e) most = std::max(most, count(e));
  return most;
}

ExpertRows group_rows_by_expert(int64_t rows, int64_t experts, const int32_t* choice) {
  ExpertRows out;
  out.offset.assign(static_cast<size_t>(experts + 1), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t e = choice[r];
    if (e >= experts) fail("moe: row {} is routed to expert {}, but there are {} experts", r, e, experts);
    if (e >= 0) ++out.offset[static_cast<size_t>(e) + 1];
  }
  for (int64_t e = 0; e < experts; ++e) out.offset[static_cast<size_t>(e + 1)] += out.offset[static_cast<size_t>(e)];
  out.rows.resize(static_cast<size_t>(out.offset.back()));
  std::vector<int64_t> next(out.offset.begin(), out.offset.end() - 1);
  for (int64_t r = 0; r < rows; ++r)
    if (choice[r] >= 0) out.rows[static_cast<size_t>(next[static_cast<size_t>(choice[r])]++)] = r;
  out.in_place = static_cast<int64_t>(out.rows.size()) == rows;
  for (int64_t i = 0; i < rows && out.in_place; ++i) out.in_place = out.rows[static_cast<size_t>(i)] == i;
  return out;
}

void gather_rows(const std::vector<int64_t>& rows, int64_t begin, int64_t end, int64_t width, const float* src,
                 float* dst) {
  for (int64_t i = begin; i < end; ++i)
    std::copy_n(src + rows[static_cast<size_t>(i)] * width, width, dst + (i - begin) * width);
}

void scatter_rows(const std::vector<int64_t>& rows, int64_t begin, int64_t end, int64_t width, const float* src,
                  float* dst) {
  for (int64_t i = begin; i < end; ++i)
    std::copy_n(src + (i - begin) * width, width, dst + rows[static_cast<size_t>(i)] * width);
}

namespace ref {
void moe_linear(int64_t rows, int64_t experts, int64_t P, int64_t Q, bool trans, const float* x, const float* w,
                const int32_t* choice, float* y) {
  const int64_t in = trans ? Q : P, out = trans ? P : Q;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t e = choice[r];
    PX_CHECK(e < experts, "ref::moe_linear: row {} routed to expert {} of {}", r, e, experts);
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0;
      if (e >= 0)
        for (int64_t i = 0; i < in; ++i) {
          const float wv = trans ? w[(e * P + o) * Q + i] : w[(e * P + i) * Q + o];
          sum += double(x[r * in + i]) * wv;
        }
      y[r * out + o] = static_cast<float>(sum);
    }
  }
}
}  // namespace ref

namespace {

// log(sum_e exp(x_e)) of a row of E logits, max-shifted, in double.
double row_logsumexp(int64_t E, const float* x) {
  float max = x[0];
  for (int64_t e = 1; e < E; ++e) max = std::max(max, x[e]);
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += std::exp(double(x[e]) - max);
  return max + std::log(sum);
}

}  // namespace

double moe_z_loss(int64_t rows, int64_t experts, const float* logits) {
  double total = 0;
  for (int64_t n = 0; n < rows; ++n) {
    const double lse = row_logsumexp(experts, logits + n * experts);
    total += lse * lse;
  }
  return total;
}

void moe_z_loss_backward(int64_t rows, int64_t experts, const float* logits, float scale, float* dlogits) {
  for (int64_t n = 0; n < rows; ++n) {
    const float* x = logits + n * experts;
    const double lse = row_logsumexp(experts, x);
    for (int64_t e = 0; e < experts; ++e)
      dlogits[n * experts + e] = static_cast<float>(scale * 2.0 * lse * std::exp(double(x[e]) - lse));
  }
}

}  // namespace px::kernels
