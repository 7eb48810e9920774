#include "comm/compression/compressor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "comm/compression/exchange.h"
#include "comm/compression/powersgd.h"
#include "comm/compression/quantize.h"
#include "comm/compression/sparse.h"
#include "comm/reduction.h"
#include "core/error.h"

namespace px::comm::compression {
namespace {

// What every rank must agree on, exchanged once per compressor.
struct Descriptor {
  uint32_t method = 0;
  int32_t rank = 0;
  double topk_fraction = 0;
  float threshold = 0;
  uint32_t error_feedback = 0;
  int64_t count = 0, rows = 0, cols = 0;
  uint64_t seed = 0;
  bool operator==(const Descriptor&) const = default;
};

Descriptor describe(const Spec& spec, int64_t count, int64_t rows, int64_t cols, uint64_t seed) {
  // Parameters the method ignores are zeroed so they cannot cause a mismatch.
  Descriptor d{.method = static_cast<uint32_t>(spec.method),
               .error_feedback = spec.lossy() && spec.error_feedback,
               .count = count, .rows = rows, .cols = cols, .seed = seed};
  if (spec.method == Method::topk) d.topk_fraction = spec.topk_fraction;
  if (spec.method == Method::threshold) d.threshold = spec.threshold;
  if (spec.method == Method::powersgd) d.rank = spec.rank;
  return d;
}

std::string to_text(const Descriptor& d) {
  Spec spec{.method = static_cast<Method>(d.method), .topk_fraction = d.topk_fraction,
            .threshold = d.threshold, .rank = d.rank, .error_feedback = d.error_feedback != 0};
  if (d.method > static_cast<uint32_t>(Method::powersgd)) return "an unknown method";
  return fmt::format("{} on {} elements ({}x{}, seed {})", spec.to_string(), d.count, d.rows,
                     d.cols, d.seed);
}

constexpr std::string_view kResidual = "residual", kQ = "powersgd.q";

}  // namespace

GradientCompressor::GradientCompressor(Spec spec, int64_t count, int64_t rows, int64_t cols,
                                       uint64_t seed)
    : spec_(spec), count_(count), rows_(rows), cols_(cols), seed_(seed) {
  if (count < 0 || rows < 0 || cols < 0 || rows * cols != count)
    fail("GradientCompressor: shape {}x{} does not hold {} elements; expected rows·cols == count",
         rows, cols, count);
  if (spec.method == Method::powersgd) {
    powersgd_ = std::make_unique<detail::PowerSgd>(rows, cols, spec.rank, seed);
    if (!powersgd_->compresses()) powersgd_.reset();
  }
  // none loses nothing; PowerSGD on a vector is sent dense.
  const bool lossless = spec.method == Method::none ||
                        (spec.method == Method::powersgd && !powersgd_);
  if (spec.error_feedback && !lossless) residual_.assign(count, 0.0f);
}

GradientCompressor::~GradientCompressor() = default;
GradientCompressor::GradientCompressor(GradientCompressor&&) noexcept = default;
GradientCompressor& GradientCompressor::operator=(GradientCompressor&&) noexcept = default;

bool GradientCompressor::low_rank() const { return powersgd_ != nullptr; }

void GradientCompressor::check_agreement(Communicator& comm, WireStats& wire) {
  const Descriptor mine = describe(spec_, count_, rows_, cols_, seed_);
  detail::Gathered all;
  wire.bytes_sent += detail::allgather_payloads(
      comm, {reinterpret_cast<const uint8_t*>(&mine), sizeof mine}, /*fixed_size=*/true, all,
      "compression agreement");
  for (int q = 0; q < comm.size(); ++q) {
    Descriptor theirs;
    std::memcpy(&theirs, all.payload(q).data(), sizeof theirs);
    if (!(theirs == mine))
      fail("gradient compression: rank {} has {}, but rank {} has {}; every rank must create the "
           "same compressors in the same order",
           comm.rank(), to_text(mine), q, to_text(theirs));
  }
  checked_ = true;
}

WireStats GradientCompressor::allreduce_sum(Communicator& comm, std::span<float> grad,
                                            uint64_t step) {
  if (static_cast<int64_t>(grad.size()) != count_)
    fail("GradientCompressor::allreduce_sum: gradient has {} elements, the compressor was made for "
         "{}",
         grad.size(), count_);
  WireStats wire;
  if (!checked_) check_agreement(comm, wire);
  if (count_ == 0) return wire;
  wire.dense_bytes = detail::ring_allreduce_bytes(count_, sizeof(float), comm.size(), comm.rank());

  // x = grad + residual: what this rank would send if the wire were free.
  std::span<float> x = grad;
  for (size_t i = 0; i < residual_.size(); ++i) x[i] += residual_[i];

  switch (spec_.method) {
    case Method::none:
      wire.bytes_sent += detail::ring_allreduce_sum(comm, x);
      break;
    case Method::fp16:
    case Method::bf16:
      wire.bytes_sent += run_dense_half(comm, x);
      break;
    case Method::int8:
    case Method::sign:
      wire.bytes_sent += run_quantized(comm, x, step);
      break;
    case Method::topk:
    case Method::threshold:
      wire.bytes_sent += run_sparse(comm, x);
      break;
    case Method::powersgd:
      wire.bytes_sent += powersgd_ ? powersgd_->allreduce(comm, x, residual_, step)
                                   : detail::ring_allreduce_sum(comm, x);
      break;
  }
  return wire;
}

// Narrowed to f16/bf16 and summed by the comm layer's ring (each hop adds in
// float32 and stores the payload type): 2(p-1)/p · 2n bytes.
uint64_t GradientCompressor::run_dense_half(Communicator& comm, std::span<float> x) {
  const bool half = spec_.method == Method::fp16;
  const DType dtype = half ? DType::f16 : DType::bf16;
  // fp16 saturates at its largest finite value instead of overflowing, so a
  // rare large element leaves a finite residual (sent later) rather than a
  // residual of -inf that would poison every later step. NaN stays NaN.
  constexpr float kHalfMax = 65504.0f;
  std::vector<uint16_t> narrow(count_);
  for (int64_t i = 0; i < count_; ++i)
    narrow[i] = half ? f32_to_f16(std::isnan(x[i]) ? x[i] : std::clamp(x[i], -kHalfMax, kHalfMax))
                     : f32_to_bf16(x[i]);
  auto widen = [&](uint16_t v) { return half ? f16_to_f32(v) : bf16_to_f32(v); };
  for (size_t i = 0; i < residual_.size(); ++i) residual_[i] = x[i] - widen(narrow[i]);
  const uint64_t sent = detail::ring_allreduce_sum(comm, Buffer(narrow.data(), count_, dtype));
  for (int64_t i = 0; i < count_; ++i) x[i] = widen(narrow[i]);
  return sent;
}

// int8 / sign: every rank's payload to every rank, decoded and summed in rank
// order (so every rank adds the same floats in the same order).
uint64_t GradientCompressor::run_quantized(Communicator& comm, std::span<float> x,
                                           uint64_t step) {
  const bool int8 = spec_.method == Method::int8;
  if (int8) detail::encode_int8(x, detail::noise_seed(seed_, step, comm.rank()), payload_);
  else detail::encode_sign(x, payload_);
  auto decode = [&](std::span<const uint8_t> payload, std::span<float> out) {
    if (int8) detail::decode_int8(payload, out);
    else detail::decode_sign(payload, out);
  };
  decoded_.resize(count_);
  if (!residual_.empty()) {
    decode(payload_, decoded_);
    for (int64_t i = 0; i < count_; ++i) residual_[i] = x[i] - decoded_[i];
  }
  detail::Gathered all;
  const uint64_t sent = detail::allgather_payloads(comm, payload_, /*fixed_size=*/true, all,
                                                   int8 ? "int8 allgather" : "sign allgather");
  std::fill(x.begin(), x.end(), 0.0f);
  for (int q = 0; q < comm.size(); ++q) {
    decode(all.payload(q), decoded_);
    for (int64_t i = 0; i < count_; ++i) x[i] += decoded_[i];
  }
  return sent;
}

// top-k / threshold: (index, bf16 value) pairs, sizes exchanged first.
uint64_t GradientCompressor::run_sparse(Communicator& comm, std::span<float> x) {
  const std::vector<uint32_t> indices =
      spec_.method == Method::topk
          ? detail::select_topk(x, detail::topk_count(spec_.topk_fraction, count_))
          : detail::select_threshold(x, spec_.threshold);
  detail::encode_sparse(x, indices, payload_);
  if (!residual_.empty()) {
    std::copy(x.begin(), x.end(), residual_.begin());
    for (uint32_t i : indices) residual_[i] = x[i] - detail::sparse_value(x[i]);
  }
  detail::Gathered all;
  const uint64_t sent = detail::allgather_payloads(
      comm, payload_, /*fixed_size=*/false, all,
      spec_.method == Method::topk ? "top-k allgather" : "threshold allgather");
  std::fill(x.begin(), x.end(), 0.0f);
  for (int q = 0; q < comm.size(); ++q) detail::add_sparse(all.payload(q), x, q);
  return sent;
}

GradientCompressor::State GradientCompressor::state() const {
  State state;
  if (!residual_.empty()) state.emplace_back(kResidual, residual_);
  if (powersgd_) state.emplace_back(kQ, powersgd_->q());
  return state;
}

void GradientCompressor::load_state(const State& state) {
  const State now = this->state();
  auto names = [](const State& s) {
    std::vector<std::string> out;
    for (const auto& [name, values] : s) out.push_back(fmt::format("'{}' ({} floats)", name, values.size()));
    return fmt::format("{}", fmt::join(out, ", "));
  };
  bool match = state.size() == now.size();
  for (size_t i = 0; match && i < state.size(); ++i)
    match = state[i].first == now[i].first && state[i].second.size() == now[i].second.size();
  if (!match)
    fail("GradientCompressor::load_state: saved state [{}] does not fit {} on {} elements "
         "({}x{}), which expects [{}]",
         names(state), spec_.to_string(), count_, rows_, cols_, names(now));
  for (const auto& [name, values] : state) {
    if (name == kResidual) residual_ = values;
    else powersgd_->q() = values;
  }
}

}  // namespace px::comm::compression
