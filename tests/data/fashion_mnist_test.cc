#include "data/fashion_mnist.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "testing/scratch_dir.h"

namespace px {
namespace {

using testing::ScratchDir;

std::vector<uint8_t> be32(uint32_t v) {
  return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
}

// An IDX image file of n images of rows x cols, pixel i = i % 256.
std::vector<uint8_t> idx_images(uint32_t n, uint32_t rows = 28, uint32_t cols = 28,
                                uint32_t magic = 0x803) {
  std::vector<uint8_t> out;
  for (uint32_t v : {magic, n, rows, cols}) {
    auto b = be32(v);
    out.insert(out.end(), b.begin(), b.end());
  }
  for (size_t i = 0; i < size_t{n} * rows * cols; ++i) out.push_back(uint8_t(i % 256));
  return out;
}

std::vector<uint8_t> idx_labels(const std::vector<uint8_t>& labels, uint32_t magic = 0x801) {
  std::vector<uint8_t> out = be32(magic);
  auto b = be32(static_cast<uint32_t>(labels.size()));
  out.insert(out.end(), b.begin(), b.end());
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

std::vector<uint8_t> gzip(const std::vector<uint8_t>& bytes) {
  uLongf size = compressBound(bytes.size()) + 64;
  std::vector<uint8_t> out(size);
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);  // gzip
  zs.next_in = const_cast<uint8_t*>(bytes.data());
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// Expects load_fashion_mnist(dir, train) to throw px::Error whose message
// holds every one of `parts`.
void expect_error(const std::string& dir, std::initializer_list<std::string> parts) {
  try {
    load_fashion_mnist(dir, FashionMnistSplit::train);
    ADD_FAILURE() << "expected px::Error mentioning " << *parts.begin();
  } catch (const Error& e) {
    std::string message = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "message is not one line: " << message;
  }
}

bool have_real_dataset() {
  return std::filesystem::exists(std::string(kFashionMnistDefaultDir) +
                                 "/train-images-idx3-ubyte.gz");
}

TEST(FashionMnist, ReadsRealSplitsWithExpectedCountsLabelsAndStatistics) {
  if (!have_real_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  FashionMnist data = load_fashion_mnist();
  EXPECT_EQ(data.train.pixels.shape(), (Shape{60000, 28, 28}));
  EXPECT_EQ(data.train.labels.shape(), (Shape{60000}));
  EXPECT_EQ(data.test.pixels.shape(), (Shape{10000, 28, 28}));
  EXPECT_EQ(data.test.labels.shape(), (Shape{10000}));
  EXPECT_EQ(data.train.labels.dtype(), DType::i32);

  // The dataset is balanced: 6000 training and 1000 test examples per class.
  std::array<int, 10> train_counts{}, test_counts{};
  for (int32_t label : data.train.labels.span<int32_t>()) ++train_counts.at(label);
  for (int32_t label : data.test.labels.span<int32_t>()) ++test_counts.at(label);
  for (int c = 0; c < 10; ++c) {
    EXPECT_EQ(train_counts[c], 6000) << "class " << c;
    EXPECT_EQ(test_counts[c], 1000) << "class " << c;
  }
  // The first example of both files is an ankle boot.
  EXPECT_EQ(data.train.labels.data<int32_t>()[0], 9);
  EXPECT_EQ(data.test.labels.data<int32_t>()[0], 9);

  // 0.2860 / 0.3530 are the training set's pixel mean / std, so normalized
  // training pixels have mean ~0 and std ~1.
  const Tensor images = data.train.images(0, data.train.size());  // (60000, 1, 28, 28)
  EXPECT_EQ(images.shape(), (Shape{60000, 1, 28, 28}));
  double sum = 0, sq = 0;
  for (float v : images.span<float>()) {
    sum += v;
    sq += double(v) * v;
  }
  const double n = double(images.numel());
  const double mean = sum / n;
  EXPECT_NEAR(mean, 0.0, 2e-3);
  EXPECT_NEAR(std::sqrt(sq / n - mean * mean), 1.0, 2e-3);
  // Background pixels (0) map to -0.2860 / 0.3530.
  EXPECT_FLOAT_EQ(images.f32()[0], (0.0f - 0.2860f) / 0.3530f);
}

TEST(FashionMnist, ReadsGzippedAndPlainFilesAndNormalizesLikeTorchvision) {
  ScratchDir dir;
  dir.write("train-images-idx3-ubyte.gz", gzip(idx_images(3)));
  dir.write("train-labels-idx1-ubyte", idx_labels({0, 9, 4}));  // uncompressed
  LabeledImages split = load_fashion_mnist(dir.path(), FashionMnistSplit::train);
  const Tensor images = split.images(0, 3);
  ASSERT_EQ(images.shape(), (Shape{3, 1, 28, 28}));
  EXPECT_EQ(split.size(), 3);
  const float* x = images.f32();
  for (int i = 0; i < 3 * 784; ++i) {
    float expected = (static_cast<float>(i % 256) / 255.0f - 0.2860f) / 0.3530f;
    ASSERT_EQ(x[i], expected) << "pixel " << i;
  }
  EXPECT_EQ(split.labels.data<int32_t>()[1], 9);
  EXPECT_EQ(split.labels.data<int32_t>()[2], 4);
}

// A batch's images are its rows of the whole split normalized: by index (in
// any order, repeats allowed) and by range.
TEST(FashionMnist, ABatchOfRowsIsThoseRowsNormalized) {
  ScratchDir dir;
  dir.write("train-images-idx3-ubyte", idx_images(5));
  dir.write("train-labels-idx1-ubyte", idx_labels({1, 2, 3, 4, 5}));
  const LabeledImages split = load_fashion_mnist(dir.path(), FashionMnistSplit::train);
  const Tensor all = split.images(0, 5);  // (5, 1, 28, 28)
  const std::vector<int64_t> rows = {4, 0, 4, 2};
  const Tensor picked = split.images(rows);
  ASSERT_EQ(picked.shape(), (Shape{4, 1, 28, 28}));
  for (size_t i = 0; i < rows.size(); ++i)
    for (int p = 0; p < 784; ++p)
      ASSERT_EQ(picked.f32()[i * 784 + p], all.f32()[rows[i] * 784 + p]) << "row " << rows[i] << " pixel " << p;
  const Tensor middle = split.images(1, 3);
  ASSERT_EQ(middle.shape(), (Shape{2, 1, 28, 28}));
  for (int p = 0; p < 2 * 784; ++p) ASSERT_EQ(middle.f32()[p], all.f32()[784 + p]) << "pixel " << p;
}

// The in-process ranks share one read of a split while any of them holds it.
TEST(FashionMnist, ASharedSplitIsReadOnceWhileHeld) {
  ScratchDir dir;
  dir.write("train-images-idx3-ubyte", idx_images(2));
  dir.write("train-labels-idx1-ubyte", idx_labels({3, 7}));
  std::shared_ptr<const LabeledImages> first = shared_fashion_mnist(dir.path(), FashionMnistSplit::train);
  std::shared_ptr<const LabeledImages> second = shared_fashion_mnist(dir.path(), FashionMnistSplit::train);
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(first->size(), 2);
  // Released by every holder, the split is read again (here: the files changed).
  first.reset();
  second.reset();
  dir.write("train-images-idx3-ubyte", idx_images(3));
  dir.write("train-labels-idx1-ubyte", idx_labels({3, 7, 1}));
  EXPECT_EQ(shared_fashion_mnist(dir.path(), FashionMnistSplit::train)->size(), 3);
  // Another split or directory is another read.
  ScratchDir other;
  other.write("train-images-idx3-ubyte", idx_images(1));
  other.write("train-labels-idx1-ubyte", idx_labels({0}));
  EXPECT_EQ(shared_fashion_mnist(other.path(), FashionMnistSplit::train)->size(), 1);
  EXPECT_THROW(shared_fashion_mnist(dir.path(), FashionMnistSplit::test), Error);  // no t10k files
}

TEST(FashionMnist, MissingDirectoryTellsHowToInstall) {
  expect_error("/nonexistent/fashion",
               {"/nonexistent/fashion", "install dataset-fashion-mnist", "--data DIR"});
}

TEST(FashionMnist, MissingFileIsNamed) {
  ScratchDir dir;
  dir.write("train-labels-idx1-ubyte.gz", gzip(idx_labels({1})));
  expect_error(dir.path(), {dir.file("train-images-idx3-ubyte.gz"), "not found"});
}

TEST(FashionMnist, TruncatedImagesAreNamedWithExpectedAndFoundSizes) {
  ScratchDir dir;
  std::vector<uint8_t> images = idx_images(2);
  images.resize(1000);
  dir.write("train-images-idx3-ubyte.gz", gzip(images));
  dir.write("train-labels-idx1-ubyte.gz", gzip(idx_labels({1, 2})));
  expect_error(dir.path(), {dir.file("train-images-idx3-ubyte.gz"), "truncated",
                            "expected 1584 bytes of images, found 1000"});
}

TEST(FashionMnist, TruncatedGzipStreamIsNamed) {
  ScratchDir dir;
  std::vector<uint8_t> compressed = gzip(idx_images(50));
  compressed.resize(compressed.size() / 2);
  dir.write("train-images-idx3-ubyte.gz", compressed);
  dir.write("train-labels-idx1-ubyte.gz", gzip(idx_labels(std::vector<uint8_t>(50, 1))));
  expect_error(dir.path(), {dir.file("train-images-idx3-ubyte.gz"), "truncated"});
}

TEST(FashionMnist, CorruptGzipDataIsNamed) {
  ScratchDir dir;
  std::vector<uint8_t> compressed = gzip(idx_images(50));
  for (size_t i = 20; i < compressed.size() - 20; i += 7) compressed[i] ^= 0x5a;
  dir.write("train-images-idx3-ubyte.gz", compressed);
  dir.write("train-labels-idx1-ubyte.gz", gzip(idx_labels(std::vector<uint8_t>(50, 1))));
  expect_error(dir.path(), {dir.file("train-images-idx3-ubyte.gz"), "corrupt"});
}

TEST(FashionMnist, WrongMagicIsNamed) {
  ScratchDir dir;
  dir.write("train-images-idx3-ubyte.gz", gzip(idx_images(1, 28, 28, 0x801)));
  dir.write("train-labels-idx1-ubyte.gz", gzip(idx_labels({1})));
  expect_error(dir.path(),
               {dir.file("train-images-idx3-ubyte.gz"), "0x00000801", "expected 0x00000803"});
}

TEST(FashionMnist, WrongImageSizeIsNamed) {
  ScratchDir dir;
  dir.write("train-images-idx3-ubyte.gz", gzip(idx_images(1, 32, 32)));
  dir.write("train-labels-idx1-ubyte.gz", gzip(idx_labels({1})));
  expect_error(dir.path(), {dir.file("train-images-idx3-ubyte.gz"), "32x32", "expected 28x28"});
}

TEST(FashionMnist, TrailingBytesAreCorrupt) {
  ScratchDir dir;
  std::vector<uint8_t> images = idx_images(1);
  images.push_back(7);
  dir.write("train-images-idx3-ubyte.gz", gzip(images));
  dir.write("train-labels-idx1-ubyte.gz", gzip(idx_labels({1})));
  expect_error(dir.path(), {dir.file("train-images-idx3-ubyte.gz"), "1 trailing bytes"});
}

TEST(FashionMnist, HugeDimsInHeaderAreTruncationNotAllocation) {
  ScratchDir dir;
  std::vector<uint8_t> images = idx_images(0);
  images[7] = 0xff, images[6] = 0xff, images[5] = 0xff, images[4] = 0xff;  // N = 2^32 - 1
  dir.write("train-images-idx3-ubyte", images);
  dir.write("train-labels-idx1-ubyte", idx_labels({}));
  expect_error(dir.path(), {dir.file("train-images-idx3-ubyte"), "truncated"});
}

// Found by fuzz/idx_fuzzer.cc (fuzz/corpus/idx/regression-zero-dim-huge-others):
// a zero dim makes the payload empty, and the element count of the other
// dims, multiplied first, overflowed int64.
TEST(FashionMnist, AZeroDimBesideHugeDimsReadsAsEmpty) {
  ScratchDir dir;
  std::vector<uint8_t> images = idx_images(0, 0, 0);
  for (int i = 4; i < 12; ++i) images[i] = 0xff;  // N = rows = 2^32 - 1, cols = 0
  dir.write("images", images);
  const Tensor pixels = read_idx_images(dir.file("images"));
  EXPECT_EQ(pixels.numel(), 0);
  EXPECT_EQ(pixels.dim(0), 0xffffffffLL);
  EXPECT_EQ(pixels.dim(2), 0);
}

TEST(FashionMnist, LabelCountMismatchNamesBothFiles) {
  ScratchDir dir;
  dir.write("train-images-idx3-ubyte.gz", gzip(idx_images(3)));
  dir.write("train-labels-idx1-ubyte.gz", gzip(idx_labels({1, 2})));
  expect_error(dir.path(), {dir.file("train-labels-idx1-ubyte.gz"), "2 labels", "3 images"});
}

TEST(FashionMnist, OutOfRangeLabelIsCorrupt) {
  ScratchDir dir;
  dir.write("train-images-idx3-ubyte.gz", gzip(idx_images(2)));
  dir.write("train-labels-idx1-ubyte.gz", gzip(idx_labels({1, 10})));
  expect_error(dir.path(), {dir.file("train-labels-idx1-ubyte.gz"), "label 10 of example 1"});
}

TEST(FashionMnist, TruncatedLabelsAreNamed) {
  ScratchDir dir;
  std::vector<uint8_t> labels = idx_labels({1, 2, 3});
  labels.pop_back();
  dir.write("train-images-idx3-ubyte.gz", gzip(idx_images(3)));
  dir.write("train-labels-idx1-ubyte.gz", gzip(labels));
  expect_error(dir.path(),
               {dir.file("train-labels-idx1-ubyte.gz"), "expected 11 bytes of labels, found 10"});
}

}  // namespace
}  // namespace px
