#include "data/fashion_mnist.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "data/sampler.h"

namespace px {
namespace {

constexpr uint32_t kIdxImagesMagic = 0x00000803;  // unsigned byte, 3 dims
constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned byte, 1 dim
constexpr std::string_view kWhat = "fashion-mnist";
constexpr std::string_view kInstallHint = "install dataset-fashion-mnist or pass --data DIR";

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Checks the IDX header of `bytes` and returns the dims that follow it.
std::vector<int64_t> parse_idx_header(const std::vector<uint8_t>& bytes, uint32_t magic, int rank,
                                      const std::string& path, std::string_view what,
                                      std::string_view kind) {
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (bytes.size() < header)
    fail("{}: file '{}' is truncated: expected a {}-byte IDX header of {}, found {} bytes", what,
         path, header, kind, bytes.size());
  uint32_t found = read_be32(bytes.data());
  if (found != magic)
    fail("{}: file '{}' is not an IDX file of {}: magic number is 0x{:08x}, expected 0x{:08x}",
         what, path, kind, found, magic);
  std::vector<int64_t> dims(rank);
  for (int i = 0; i < rank; ++i) dims[i] = read_be32(bytes.data() + 4 + 4 * i);
  return dims;
}

// The dims come from the file, so their product is computed without overflow.
void check_payload_size(const std::vector<uint8_t>& bytes, size_t header,
                        const std::vector<int64_t>& dims, const std::string& path,
                        std::string_view what, std::string_view kind) {
  unsigned __int128 expected = header;
  unsigned __int128 payload = 1;
  for (int64_t d : dims) payload *= static_cast<uint64_t>(d);  // each < 2^32: no wrap for rank <= 3
  expected += payload;
  if (expected >> 64)
    fail("{}: file '{}' is corrupt: its IDX dims {} describe more than 2^64 bytes of {}", what,
         path, dims, kind);
  const uint64_t want = static_cast<uint64_t>(expected);
  if (bytes.size() < want)
    fail("{}: file '{}' is truncated: expected {} bytes of {}, found {}", what, path, want, kind,
         bytes.size());
  if (bytes.size() > want)
    fail("{}: file '{}' is corrupt: expected {} bytes of {}, found {} ({} trailing bytes)", what,
         path, want, kind, bytes.size(), bytes.size() - want);
}

// `dir/name.gz` if present, else `dir/name`; px::Error with the fix otherwise.
std::string find_idx_file(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("{}: data directory '{}' does not exist: {}", kWhat, dir, kInstallHint);
  std::string gz = (fs::path(dir) / (name + ".gz")).string();
  if (fs::exists(gz, ec)) return gz;
  std::string plain = (fs::path(dir) / name).string();
  if (fs::exists(plain, ec)) return plain;
  fail("{}: file '{}' not found (nor uncompressed '{}'): {}", kWhat, gz, plain, kInstallHint);
}

}  // namespace

std::vector<uint8_t> read_maybe_gzipped_file(const std::string& path, std::string_view what) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr)
    fail("{}: cannot open file '{}': {}", what, path,
         errno != 0 ? std::strerror(errno) : "out of memory");
  std::vector<uint8_t> bytes;
  // Read in chunks appended as they come (not resized 1 MiB at a time:
  // zero-filling what is then cut off cost more than the read).
  std::vector<uint8_t> chunk(1u << 16);
  for (;;) {
    const int n = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      std::string message = gzerror(file, &code);
      gzclose(file);
      fail("{}: file '{}' is corrupt: gzip error: {}", what, path, message);
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + n);
  }
  // A gzip stream cut short reads as a short stream plus Z_BUF_ERROR.
  int code = Z_OK;
  std::string message = gzerror(file, &code);
  gzclose(file);
  if (code != Z_OK)
    fail("{}: file '{}' is {}: gzip error: {}", what, path,
         code == Z_BUF_ERROR ? "truncated" : "corrupt", message);
  return bytes;
}

Tensor read_idx_images(const std::string& path, std::string_view what) {
  std::vector<uint8_t> bytes = read_maybe_gzipped_file(path, what);
  std::vector<int64_t> dims = parse_idx_header(bytes, kIdxImagesMagic, 3, path, what, "images");
  check_payload_size(bytes, 16, dims, path, what, "images");
  Tensor pixels = Tensor::empty(Shape{dims[0], dims[1], dims[2]}, DType::u8);  // (N, rows, cols)
  if (pixels.nbytes() > 0) std::memcpy(pixels.raw(), bytes.data() + 16, pixels.nbytes());
  return pixels;
}

Tensor read_idx_labels(const std::string& path, std::string_view what) {
  std::vector<uint8_t> bytes = read_maybe_gzipped_file(path, what);
  std::vector<int64_t> dims = parse_idx_header(bytes, kIdxLabelsMagic, 1, path, what, "labels");
  check_payload_size(bytes, 8, dims, path, what, "labels");
  Tensor labels = Tensor::empty(Shape{dims[0]}, DType::u8);  // (N)
  if (labels.nbytes() > 0) std::memcpy(labels.raw(), bytes.data() + 8, labels.nbytes());
  return labels;
}

Tensor normalize_images(const Tensor& pixels, float mean, float std) {
  PX_CHECK_EQ(pixels.rank(), 3);
  const int64_t n = pixels.dim(0), rows = pixels.dim(1), cols = pixels.dim(2);
  Tensor images = Tensor::empty(Shape{n, 1, rows, cols});  // (N, 1, rows, cols)
  const uint8_t* src = pixels.data<uint8_t>();
  float* dst = images.f32();
  // A lookup table keeps the exact float32 results of (p / 255 - mean) / std.
  std::array<float, 256> table;
  for (int p = 0; p < 256; ++p) table[p] = (static_cast<float>(p) / 255.0f - mean) / std;
  for (int64_t i = 0, count = images.numel(); i < count; ++i) dst[i] = table[src[i]];
  return images;
}

LabeledImages load_fashion_mnist(const std::string& dir, FashionMnistSplit split) {
  const std::string prefix = split == FashionMnistSplit::train ? "train" : "t10k";
  const std::string images_path = find_idx_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_idx_file(dir, prefix + "-labels-idx1-ubyte");

  Tensor pixels = read_idx_images(images_path, kWhat);  // (N, 28, 28) u8
  if (pixels.dim(1) != kFashionMnistRows || pixels.dim(2) != kFashionMnistCols)
    fail("{}: file '{}' has images of {}x{} pixels, expected {}x{}", kWhat, images_path,
         pixels.dim(1), pixels.dim(2), kFashionMnistRows, kFashionMnistCols);
  Tensor raw_labels = read_idx_labels(labels_path, kWhat);  // (N) u8
  if (raw_labels.dim(0) != pixels.dim(0))
    fail("{}: file '{}' has {} labels but '{}' has {} images, expected equal counts", kWhat,
         labels_path, raw_labels.dim(0), images_path, pixels.dim(0));

  LabeledImages out;
  out.pixels = std::move(pixels);
  out.labels = Tensor::empty(Shape{raw_labels.dim(0)}, DType::i32);
  const uint8_t* src = raw_labels.data<uint8_t>();
  int32_t* dst = out.labels.data<int32_t>();
  for (int64_t i = 0, n = raw_labels.dim(0); i < n; ++i) {
    if (src[i] >= kFashionMnistClasses)
      fail("{}: file '{}' is corrupt: label {} of example {}, expected a class in [0, {})", kWhat,
           labels_path, src[i], i, kFashionMnistClasses);
    dst[i] = src[i];
  }
  return out;
}

Tensor LabeledImages::images(std::span<const int64_t> rows) const {
  return normalize_images(gather_rows(pixels, rows));
}

Tensor LabeledImages::images(int64_t begin, int64_t end) const {
  return normalize_images(pixels.slice_rows(begin, end));
}

FashionMnist load_fashion_mnist(const std::string& dir) {
  return FashionMnist{.train = load_fashion_mnist(dir, FashionMnistSplit::train),
                      .test = load_fashion_mnist(dir, FashionMnistSplit::test)};
}

std::shared_ptr<const LabeledImages> shared_fashion_mnist(const std::string& dir, FashionMnistSplit split) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, FashionMnistSplit>, std::weak_ptr<const LabeledImages>> loaded;
  // Held while reading: ranks asking at once wait for the first one's copy.
  std::lock_guard lock(mutex);
  std::weak_ptr<const LabeledImages>& slot = loaded[{dir, split}];
  if (std::shared_ptr<const LabeledImages> held = slot.lock()) return held;
  auto fresh = std::make_shared<const LabeledImages>(load_fashion_mnist(dir, split));
  slot = fresh;
  return fresh;
}

}  // namespace px
