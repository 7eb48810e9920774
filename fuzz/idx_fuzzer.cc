// IDX files (Fashion-MNIST images and labels), plain or gzipped.
#include "data/fashion_mnist.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static px::fuzz::MemoryFile file;
  const std::string& path = file.hold(data, size);
  px::fuzz::expect_value_or_named_error([&] {
    const px::Tensor images = px::read_idx_images(path);
    px::normalize_images(images);
  });
  px::fuzz::expect_value_or_named_error([&] { px::read_idx_labels(path); });
  return 0;
}
