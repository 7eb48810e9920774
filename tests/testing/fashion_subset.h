// A small Fashion-MNIST for tests that train whole epochs: the first
// examples of the installed dataset's splits, written as plain IDX files
// into a scratch directory (what --data / JobSpec::data reads).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/fashion_mnist.h"
#include "testing/scratch_dir.h"

namespace px::testing {

namespace detail {

inline void put_u32(std::vector<uint8_t>& out, uint32_t v) {  // big-endian, as IDX stores it
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

inline void write_split(const ScratchDir& dir, const std::string& prefix, FashionMnistSplit split, int64_t n) {
  const LabeledImages all = load_fashion_mnist(std::string(kFashionMnistDefaultDir), split);
  std::vector<uint8_t> images, labels;
  put_u32(images, 0x803);
  put_u32(images, static_cast<uint32_t>(n));
  put_u32(images, kFashionMnistRows);
  put_u32(images, kFashionMnistCols);
  const auto* pixels = static_cast<const uint8_t*>(all.pixels.raw());
  images.insert(images.end(), pixels, pixels + n * kFashionMnistRows * kFashionMnistCols);
  put_u32(labels, 0x801);
  put_u32(labels, static_cast<uint32_t>(n));
  for (int64_t i = 0; i < n; ++i) labels.push_back(static_cast<uint8_t>(all.labels.data<int32_t>()[i]));
  dir.write(prefix + "-images-idx3-ubyte", images);
  dir.write(prefix + "-labels-idx1-ubyte", labels);
}

}  // namespace detail

// `train` training and `test` test examples; returns the directory.
inline std::string write_fashion_subset(const ScratchDir& dir, int64_t train, int64_t test) {
  detail::write_split(dir, "train", FashionMnistSplit::train, train);
  detail::write_split(dir, "t10k", FashionMnistSplit::test, test);
  return dir.path();
}

}  // namespace px::testing
