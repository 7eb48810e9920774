// safetensors: the tensor file format of Hugging Face, readable by
// safetensors.torch / safetensors.numpy. Layout: an 8-byte little-endian
// header length N; N bytes of JSON header, space-padded to a multiple of 8,
//   {"__metadata__":{"key":"value",...},
//    "name":{"dtype":"F32","shape":[2,3],"data_offsets":[begin,end]},...}
// then the raw little-endian bytes of every tensor, back to back, with
// data_offsets relative to the start of this data section.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace px {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct SafetensorsFile {
  std::string path;
  NamedTensors tensors;  // in file (data offset) order: the order they were saved in
  std::map<std::string, std::string> metadata;

  bool contains(std::string_view name) const;
  // px::Error naming the file and the tensor when it is absent.
  const Tensor& at(std::string_view name) const;
};

// Writes `tensors` atomically (see atomic_file.h) to `path`: the header lists
// "__metadata__" first (omitted when empty), then the tensors in the given
// order, whose data follow in the same order. Equal inputs give identical
// bytes. Names must be unique, non-empty and not "__metadata__"; tensors must
// be defined (px::Error otherwise).
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads and validates a whole file. Any deviation from the format throws
// px::Error naming the file and the problem: fewer than 8 bytes, a header
// length past the end of the file, malformed JSON, a dtype other than F32,
// F16, BF16, I32, I64, U8, a negative or non-integer dim, data_offsets that do
// not match shape x dtype size, overlap, leave gaps, or run past the data
// (truncated file), and bytes after the last tensor.
SafetensorsFile load_safetensors(const std::string& path);

// A safetensors file opened to read one tensor at a time: the header is
// read and checked on construction exactly as load_safetensors checks it
// (the same errors); read() then reads one tensor's bytes. Checkpoint shard
// files are read this way: a rank reads only the runs it needs.
class SafetensorsReader {
 public:
  struct Entry {
    std::string name;
    DType dtype = DType::f32;
    Shape shape;
    uint64_t begin = 0, end = 0;  // byte offsets in the data section
  };

  explicit SafetensorsReader(std::string path);
  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<Entry>& entries() const { return entries_; }  // in data order
  bool contains(std::string_view name) const;
  // px::Error naming the file and the tensor when it is absent, or when the
  // file was cut short since it was opened.
  Tensor read(std::string_view name) const;

 private:
  const Entry& entry(std::string_view name) const;

  std::string path_;
  std::map<std::string, std::string> metadata_;
  std::vector<Entry> entries_;
  uint64_t data_start_ = 0;
};

}  // namespace px
