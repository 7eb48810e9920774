#include "harness.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <vector>

#include "comm/reduction.h"

namespace px::comm::testing {
namespace {

// Small integers: exact in f32, f16 and bf16, and exact when summed by 8 ranks.
float input_value(int rank, int64_t i) {
  return static_cast<float>((rank * 131 + i * 7) % 23) - 11.0f;
}

std::vector<uint8_t> encode(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> bytes(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::f32) {
      std::memcpy(bytes.data() + 4 * i, &values[i], 4);
    } else {
      uint16_t h = dtype == DType::f16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

float decode(const uint8_t* bytes, int64_t i, DType dtype) {
  if (dtype == DType::f32) {
    float v;
    std::memcpy(&v, bytes + 4 * i, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, bytes + 2 * i, 2);
  return dtype == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
}

float reduce_expected(Reduction op, int ranks, int64_t i) {
  float acc = input_value(0, i);
  for (int r = 1; r < ranks; ++r) {
    float v = input_value(r, i);
    if (op == Reduction::max) acc = std::max(acc, v);
    else if (op == Reduction::min) acc = std::min(acc, v);
    else acc += v;
  }
  return op == Reduction::avg ? acc / ranks : acc;
}

std::string compare(const std::vector<uint8_t>& got, int64_t offset, const std::vector<float>& want,
                    DType dtype) {
  const float tolerance = dtype == DType::f32 ? 1e-5f : 2e-2f;
  for (size_t i = 0; i < want.size(); ++i) {
    float g = decode(got.data(), offset + static_cast<int64_t>(i), dtype);
    if (!(std::fabs(g - want[i]) <= tolerance * std::max(1.0f, std::fabs(want[i]))))
      return fmt::format("element {}: got {}, expected {}", offset + static_cast<int64_t>(i), g,
                         want[i]);
  }
  return "";
}

}  // namespace

std::string describe(const Case& c, int ranks) {
  return fmt::format("{}({}) {} n={} {} on {} ranks", collective_name(c.collective),
                     algorithm_name(c.algorithm), reduction_name(c.op), c.count,
                     dtype_name(c.dtype), ranks);
}

std::vector<int64_t> sweep_counts() { return {0, 1, 2, 3, 7, 31, 97, 1000, 4099, 65537}; }

std::string run_case(Communicator& comm, const Case& c) {
  const int p = comm.size(), r = comm.rank();
  const int64_t n = c.count;
  const CollectiveOptions options{.algorithm = c.algorithm, .servers = c.servers,
                                  .ranks_per_node = c.ranks_per_node};
  std::vector<float> mine(n), want;
  for (int64_t i = 0; i < n; ++i) mine[i] = input_value(r, i);
  switch (c.collective) {
    case Collective::allreduce: {
      auto data = encode(mine, c.dtype);
      allreduce(comm, Buffer(data.data(), n, c.dtype), c.op, options);
      for (int64_t i = 0; i < n; ++i) want.push_back(reduce_expected(c.op, p, i));
      return compare(data, 0, want, c.dtype);
    }
    case Collective::reduce_scatter: {
      auto input = encode(mine, c.dtype);
      const Block b = block(n, p, r);
      std::vector<uint8_t> output(b.count * dtype_size(c.dtype));
      reduce_scatter(comm, input.data(), Buffer(output.data(), b.count, c.dtype), n, c.op, options);
      for (int64_t i = b.begin; i < b.begin + b.count; ++i) want.push_back(reduce_expected(c.op, p, i));
      return compare(output, 0, want, c.dtype);
    }
    case Collective::allgather: {
      // The global vector is input_value(i % 5, i); rank r holds block r.
      const Block b = block(n, p, r);
      std::vector<float> part;
      for (int64_t i = b.begin; i < b.begin + b.count; ++i) part.push_back(input_value(i % 5, i));
      auto input = encode(part, c.dtype);
      std::vector<uint8_t> output(n * dtype_size(c.dtype));
      allgather(comm, input.data(), Buffer(output.data(), n, c.dtype), options);
      for (int64_t i = 0; i < n; ++i) want.push_back(input_value(i % 5, i));
      return compare(output, 0, want, c.dtype);
    }
    case Collective::broadcast: {
      const int root = p - 1;
      for (int64_t i = 0; i < n; ++i) mine[i] = r == root ? input_value(root, i) : 99.0f;
      auto data = encode(mine, c.dtype);
      broadcast(comm, Buffer(data.data(), n, c.dtype), root, options);
      for (int64_t i = 0; i < n; ++i) want.push_back(input_value(root, i));
      return compare(data, 0, want, c.dtype);
    }
    case Collective::reduce: {
      const int root = p / 2;
      auto data = encode(mine, c.dtype);
      reduce(comm, Buffer(data.data(), n, c.dtype), c.op, root, options);
      if (r != root) return "";
      for (int64_t i = 0; i < n; ++i) want.push_back(reduce_expected(c.op, p, i));
      return compare(data, 0, want, c.dtype);
    }
    case Collective::all_to_all: {
      // Block q of rank r's input: r·1000 + q·10 + j % 7 (exact in f32).
      std::vector<float> input(p * n);
      for (int q = 0; q < p; ++q)
        for (int64_t j = 0; j < n; ++j) input[q * n + j] = r * 1000.0f + q * 10.0f + j % 7;
      auto in = encode(input, c.dtype);
      std::vector<uint8_t> output(p * n * dtype_size(c.dtype));
      all_to_all(comm, in.data(), Buffer(output.data(), p * n, c.dtype), options);
      for (int q = 0; q < p; ++q)
        for (int64_t j = 0; j < n; ++j) want.push_back(q * 1000.0f + r * 10.0f + j % 7);
      return compare(output, 0, want, c.dtype);
    }
    case Collective::barrier:
      barrier(comm, options);
      return "";
  }
  return "unknown collective";
}

}  // namespace px::comm::testing
