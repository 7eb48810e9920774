// Optimizer updates over n parameters, matching torch.optim semantics exactly.
#pragma once

#include <cstdint>

namespace px::kernels {

// torch.optim.SGD(momentum, weight_decay, dampening=0, nesterov=False):
//   g = grad + wd * p;  buf = momentum * buf + g (buf = g on the first step);  p -= lr * buf
void sgd_momentum(int64_t n, float lr, float momentum, float weight_decay, bool first_step,
                  float* param, const float* grad, float* momentum_buf);

// torch.optim.AdamW (decoupled decay): p *= 1 - lr*wd; m = b1 m + (1-b1) g;
// v = b2 v + (1-b2) g^2; p -= lr/(1-b1^t) * m / (sqrt(v/(1-b2^t)) + eps). step t >= 1.
void adamw(int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
           int64_t step, float* param, const float* grad, float* m, float* v);

namespace ref {
void sgd_momentum(int64_t n, float lr, float momentum, float weight_decay, bool first_step,
                  float* param, const float* grad, float* momentum_buf);
void adamw(int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
           int64_t step, float* param, const float* grad, float* m, float* v);
}  // namespace ref

}  // namespace px::kernels
