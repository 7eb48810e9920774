// Conv2d, reference: direct loops in double over the definition
//   y[n,co,oh,ow] = bias[co] + sum_{ci,kh,kw} w[co,ci,kh,kw] x[n,ci,oh*s-p+kh,ow*s-p+kw].
#include <cstddef>
#include <vector>

#include "kernels/conv.h"

namespace px::kernels::ref {
namespace {

// Calls f(ih, iw) for the input pixel under tap (kh, kw) of output (oh, ow), if inside.
template <typename F>
void tap(const Conv2dShape& s, int64_t oh, int64_t ow, int64_t kh, int64_t kw, F f) {
  int64_t ih = oh * s.stride - s.pad + kh, iw = ow * s.stride - s.pad + kw;
  if (ih >= 0 && ih < s.H && iw >= 0 && iw < s.W) f(ih, iw);
}

}  // namespace

void conv2d(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) {
  const int64_t Ho = s.Ho(), Wo = s.Wo();
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t co = 0; co < s.Co; ++co)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          double acc = bias != nullptr ? bias[co] : 0.0;
          for (int64_t ci = 0; ci < s.Ci; ++ci)
            for (int64_t kh = 0; kh < s.Kh; ++kh)
              for (int64_t kw = 0; kw < s.Kw; ++kw)
                tap(s, oh, ow, kh, kw, [&](int64_t ih, int64_t iw) {
                  acc += static_cast<double>(w[((co * s.Ci + ci) * s.Kh + kh) * s.Kw + kw]) *
                         x[((n * s.Ci + ci) * s.H + ih) * s.W + iw];
                });
          y[((n * s.Co + co) * Ho + oh) * Wo + ow] = static_cast<float>(acc);
        }
}

void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                     float* dx, float* dw, float* dbias) {
  const int64_t Ho = s.Ho(), Wo = s.Wo();
  std::vector<double> gx(static_cast<size_t>(s.N * s.Ci * s.H * s.W), 0.0);
  std::vector<double> gw(static_cast<size_t>(s.Co * s.Ci * s.Kh * s.Kw), 0.0);
  std::vector<double> gb(static_cast<size_t>(s.Co), 0.0);
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t co = 0; co < s.Co; ++co)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const double g = dy[((n * s.Co + co) * Ho + oh) * Wo + ow];
          gb[static_cast<size_t>(co)] += g;
          for (int64_t ci = 0; ci < s.Ci; ++ci)
            for (int64_t kh = 0; kh < s.Kh; ++kh)
              for (int64_t kw = 0; kw < s.Kw; ++kw)
                tap(s, oh, ow, kh, kw, [&](int64_t ih, int64_t iw) {
                  const int64_t xi = ((n * s.Ci + ci) * s.H + ih) * s.W + iw;
                  const int64_t wi = ((co * s.Ci + ci) * s.Kh + kh) * s.Kw + kw;
                  gx[static_cast<size_t>(xi)] += g * w[wi];
                  gw[static_cast<size_t>(wi)] += g * x[xi];
                });
        }
  if (dx != nullptr)
    for (size_t i = 0; i < gx.size(); ++i) dx[i] = static_cast<float>(gx[i]);
  for (size_t i = 0; i < gw.size(); ++i) dw[i] += static_cast<float>(gw[i]);
  if (dbias != nullptr)
    for (size_t i = 0; i < gb.size(); ++i) dbias[i] += static_cast<float>(gb[i]);
}

}  // namespace px::kernels::ref
