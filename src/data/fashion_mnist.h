// Fashion-MNIST: 70,000 28x28 grayscale images of clothing in 10 classes, read
// from the IDX files that Debian's dataset-fashion-mnist package installs
// (gzip'd or plain). Pixels are kept as bytes, a quarter of float32's memory;
// the images a batch takes come out normalized exactly as the PyTorch
// reference script does: (pixel / 255 - 0.2860) / 0.3530, in float32.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace px {

inline constexpr std::string_view kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";
inline constexpr int kFashionMnistClasses = 10;
inline constexpr int kFashionMnistRows = 28;
inline constexpr int kFashionMnistCols = 28;
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;
inline constexpr std::array<std::string_view, kFashionMnistClasses> kFashionMnistClassNames = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

// One split of a labeled image dataset. N = number of examples.
struct LabeledImages {
  Tensor pixels;  // (N, 28, 28) u8, as stored
  Tensor labels;  // (N) i32, in [0, 10)
  int64_t size() const { return labels.defined() ? labels.dim(0) : 0; }
  // The examples at `rows` / in [begin, end), normalized: (B, 1, 28, 28) f32.
  Tensor images(std::span<const int64_t> rows) const;
  Tensor images(int64_t begin, int64_t end) const;
};

struct FashionMnist {
  LabeledImages train;  // 60,000 examples in the official files
  LabeledImages test;   // 10,000 examples ("t10k")
};

enum class FashionMnistSplit { train, test };

// Reads one split from `dir`: {train,t10k}-images-idx3-ubyte and
// {train,t10k}-labels-idx1-ubyte, each either with a ".gz" suffix (preferred)
// or uncompressed. Throws px::Error naming the file for a missing directory or
// file, a bad magic number, dims other than 28x28, an image/label count
// mismatch, truncated or trailing data, a corrupt gzip stream, or a label >= 10.
LabeledImages load_fashion_mnist(const std::string& dir, FashionMnistSplit split);
// Both splits.
FashionMnist load_fashion_mnist(const std::string& dir = std::string(kFashionMnistDefaultDir));
// One split, read once for every caller in this process that holds it: the
// in-process ranks of a job share one copy (read-only) instead of each
// reading its own. It is freed with the last holder; a later call reads the
// files again.
std::shared_ptr<const LabeledImages> shared_fashion_mnist(const std::string& dir, FashionMnistSplit split);

// Lower level, for other IDX datasets and for tests.
// Decompressed bytes of `path` (gzip or plain; zlib detects which).
std::vector<uint8_t> read_maybe_gzipped_file(const std::string& path, std::string_view what);
// IDX image file (magic 0x00000803, dims N x rows x cols, then N*rows*cols
// bytes) as raw pixels: (N, rows, cols) u8.
Tensor read_idx_images(const std::string& path, std::string_view what = "idx");
// IDX label file (magic 0x00000801, dim N, then N bytes): (N) u8.
Tensor read_idx_labels(const std::string& path, std::string_view what = "idx");
// u8 pixels (N, rows, cols) -> (N, 1, rows, cols) f32 with
// x = (float(p) / 255 - mean) / std, in float32 arithmetic as torchvision's
// ToTensor + Normalize.
Tensor normalize_images(const Tensor& pixels, float mean = kFashionMnistMean,
                        float std = kFashionMnistStd);

}  // namespace px
