// oneDNN's matmul primitive for bf16 GEMM, one primitive per shape.
#include "kernels/dnnl_matmul.h"

#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/error.h"

// GNU OpenMP's, the runtime Debian's oneDNN runs on (declared here rather
// than by <omp.h>: clang's header belongs to its own runtime).
extern "C" int omp_get_max_threads();
extern "C" void omp_set_num_threads(int num_threads);

namespace px::kernels::detail {
namespace {

using dnnl::memory;

// Everything a primitive bakes in: operand shapes and strides, alpha (an
// output scale) and beta (a sum post-op) as attributes, whether a bias row
// is added, and the output's type.
struct Shape {
  bool trans_a, trans_b;
  int64_t M, N, K, lda, ldb, ldc;
  float alpha, beta;
  bool bias = false, c_in_bf16 = false;
  auto operator<=>(const Shape&) const = default;
};

struct Primitive {
  dnnl::matmul::primitive_desc desc;
  dnnl::matmul matmul;
  size_t scratchpad_bytes;
};

// While alive, OpenMP (hence oneDNN) runs one thread on the calling
// thread. The setting is per thread in libgomp, so pool workers get it too.
// OpenBLAS's set_num_threads writes the same setting; it is restored.
class OneOmpThread {
 public:
  OneOmpThread() : saved_(omp_get_max_threads()) {
    if (saved_ != 1) omp_set_num_threads(1);
  }
  ~OneOmpThread() {
    if (saved_ != 1) omp_set_num_threads(saved_);
  }
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;

 private:
  int saved_;
};

// The engine and the cache are never destroyed: the pool's workers hold
// thread-local streams and may outlive static destructors at exit.
const dnnl::engine& engine() {
  static const dnnl::engine* cpu = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *cpu;
}

// Row-major [rows, cols] stored either way round: strides {ld, 1}, or
// {1, ld} when the matrix is held transposed.
memory::desc matrix(int64_t rows, int64_t cols, int64_t ld, bool transposed, memory::data_type type) {
  const memory::dims strides = transposed ? memory::dims{1, ld} : memory::dims{ld, 1};
  return memory::desc({rows, cols}, type, strides);
}

std::shared_ptr<const Primitive> build(const Shape& s) {
  const memory::desc a = matrix(s.M, s.K, s.lda, s.trans_a, memory::data_type::bf16);
  const memory::desc b = matrix(s.K, s.N, s.ldb, s.trans_b, memory::data_type::bf16);
  const memory::desc c =
      matrix(s.M, s.N, s.ldc, false, s.c_in_bf16 ? memory::data_type::bf16 : memory::data_type::f32);
  dnnl::primitive_attr attr;
  // Scratchpad passed per call (a thread's own): one primitive may run on
  // several pool threads at once, and Debian's build is not configured for
  // concurrent execution with its own scratchpad (DNNL_ENABLE_CONCURRENT_EXEC
  // unset in dnnl_config.h).
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.alpha != 1.0f) attr.set_output_scales(0, {s.alpha});
  if (s.beta != 0.0f) {
    dnnl::post_ops sum;
    sum.append_sum(s.beta);  // C = alpha * A B + beta * C
    attr.set_post_ops(sum);
  }
  const dnnl::matmul::desc op = s.bias ? dnnl::matmul::desc(a, b, memory::desc({1, s.N}, memory::data_type::f32, {s.N, 1}), c)
                                       : dnnl::matmul::desc(a, b, c);
  dnnl::matmul::primitive_desc desc(op, attr, engine());
  auto primitive = std::make_shared<Primitive>(Primitive{desc, dnnl::matmul(desc), 0});
  primitive->scratchpad_bytes = desc.scratchpad_desc().get_size();
  return primitive;
}

// Built primitives, shared by every thread. A model has a few dozen GEMM
// shapes (times the pool's split); sampling with a growing context adds a
// few per token, so the cache starts over past kMaxShapes.
class Cache {
 public:
  std::shared_ptr<const Primitive> get(const Shape& shape) {
    {
      std::shared_lock lock(mutex_);
      if (auto it = built_.find(shape); it != built_.end()) return it->second;
    }
    std::shared_ptr<const Primitive> primitive = build(shape);  // outside the lock: ~ms
    std::unique_lock lock(mutex_);
    if (built_.size() >= kMaxShapes) built_.clear();
    return built_.try_emplace(shape, std::move(primitive)).first->second;
  }

 private:
  static constexpr size_t kMaxShapes = 4096;
  std::shared_mutex mutex_;
  std::map<Shape, std::shared_ptr<const Primitive>> built_;
};

Cache& cache() {
  static Cache* shared = new Cache;
  return *shared;
}

// One cached primitive run on this thread, its scratchpad the thread's own.
void run(const Shape& shape, const bf16* A, const bf16* B, const float* bias, void* C) {
  OneOmpThread one_thread;
  const auto primitive = cache().get(shape);
  thread_local std::vector<uint8_t> scratchpad;
  if (scratchpad.size() < primitive->scratchpad_bytes) scratchpad.resize(primitive->scratchpad_bytes);
  const dnnl::matmul::primitive_desc& desc = primitive->desc;
  // oneDNN's memory objects only wrap the pointers; the data is not copied.
  memory a(desc.src_desc(), engine(), const_cast<bf16*>(A));
  memory b(desc.weights_desc(), engine(), const_cast<bf16*>(B));
  memory c(desc.dst_desc(), engine(), C);
  memory pad(desc.scratchpad_desc(), engine(), scratchpad.data());
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}, {DNNL_ARG_SCRATCHPAD, pad}};
  if (shape.bias) args.emplace(DNNL_ARG_BIAS, memory(desc.bias_desc(), engine(), const_cast<float*>(bias)));
  thread_local dnnl::stream stream(engine());
  primitive->matmul.execute(stream, args);
  stream.wait();
}

}  // namespace

void matmul_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C,
                 int64_t ldc) {
  PX_CHECK(M >= 1 && N >= 1 && K >= 1, "M={} N={} K={}", M, N, K);
  run({trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta}, A, B, nullptr, C);
}

void matmul_bf16_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
                      const bf16* B, int64_t ldb, const float* bias, void* C, int64_t ldc, bool c_in_bf16) {
  PX_CHECK(M >= 1 && N >= 1 && K >= 1, "M={} N={} K={}", M, N, K);
  run({trans_a, trans_b, M, N, K, lda, ldb, ldc, 1.0f, 0.0f, bias != nullptr, c_in_bf16}, A, B, bias, C);
}

std::string matmul_bf16_implementation(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K) {
  OneOmpThread one_thread;
  const Shape shape{trans_a, trans_b, M, N, K, trans_a ? M : K, trans_b ? K : N, N, 1.0f, 0.0f};
  return cache().get(shape)->desc.impl_info_str();
}

}  // namespace px::kernels::detail
