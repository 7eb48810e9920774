#include "runtime/state/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/atomic_file.h"

namespace px {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

constexpr std::string_view kMetadataKey = "__metadata__";
// The reference implementation refuses headers above 100 MB; so do we.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

using OrderedJson = nlohmann::ordered_json;

// The data type names the safetensors spec defines beyond the ones parallax has.
bool is_other_safetensors_dtype(std::string_view name) {
  for (std::string_view known : {"BOOL", "I8", "I16", "U16", "U32", "U64", "F64", "F8_E4M3",
                                 "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"})
    if (name == known) return true;
  return false;
}

DType parse_dtype(const std::string& name, const std::string& tensor, const std::string& path) {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8})
    if (dtype_name(d) == name) return d;
  fail(
      "safetensors: file '{}': tensor '{}' has {} dtype '{}', expected one of F32, F16, BF16, "
      "I32, I64, U8",
      path, tensor, is_other_safetensors_dtype(name) ? "unsupported" : "unknown", name);
}

class File {
 public:
  explicit File(const std::string& path)
      : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) fail("safetensors: cannot open file '{}': {}", path, std::strerror(errno));
  }
  ~File() { ::close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  uint64_t size() const {
    struct stat st;
    if (::fstat(fd_, &st) != 0)
      fail("safetensors: cannot stat file '{}': {}", path_, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("safetensors: '{}' is not a regular file", path_);
    return static_cast<uint64_t>(st.st_size);
  }
  // Reads exactly `bytes` at `offset`, or throws naming what was being read.
  void read(void* data, uint64_t bytes, uint64_t offset, std::string_view what) const {
    char* p = static_cast<char*>(data);
    while (bytes > 0) {
      ssize_t n = ::pread(fd_, p, bytes, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        fail("safetensors: file '{}': reading {} failed: {}", path_, what, std::strerror(errno));
      if (n == 0) fail("safetensors: file '{}' is truncated while reading {}", path_, what);
      p += n;
      bytes -= static_cast<uint64_t>(n);
      offset += static_cast<uint64_t>(n);
    }
  }

 private:
  std::string path_;
  int fd_;
};

using Entry = SafetensorsReader::Entry;

uint64_t json_offset(const nlohmann::json& value, const std::string& tensor,
                     const std::string& path) {
  if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<int64_t>() >= 0))
    fail("safetensors: file '{}': tensor '{}' has data_offset {}, expected a non-negative integer",
         path, tensor, value.dump());
  return value.get<uint64_t>();
}

Entry parse_entry(const std::string& name, const nlohmann::json& info, const std::string& path) {
  if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") ||
      !info.contains("data_offsets"))
    fail(
        "safetensors: file '{}': tensor '{}' has header entry {}, expected an object with dtype, "
        "shape and data_offsets",
        path, name, info.dump());
  if (!info["dtype"].is_string())
    fail("safetensors: file '{}': tensor '{}' has dtype {}, expected a string", path, name,
         info["dtype"].dump());
  Entry entry;
  entry.name = name;
  entry.dtype = parse_dtype(info["dtype"].get<std::string>(), name, path);
  const nlohmann::json& shape = info["shape"];
  if (!shape.is_array())
    fail("safetensors: file '{}': tensor '{}' has shape {}, expected an array of dims", path, name,
         shape.dump());
  std::vector<int64_t> dims;
  for (const auto& d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      fail("safetensors: file '{}': tensor '{}' has shape {}, expected non-negative integer dims",
           path, name, shape.dump());
    dims.push_back(d.get<int64_t>());
  }
  entry.shape = Shape(dims);
  const nlohmann::json& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    fail("safetensors: file '{}': tensor '{}' has data_offsets {}, expected [begin, end]", path,
         name, offsets.dump());
  entry.begin = json_offset(offsets[0], name, path);
  entry.end = json_offset(offsets[1], name, path);
  if (entry.end < entry.begin)
    fail("safetensors: file '{}': tensor '{}' has data_offsets [{}, {}] with end before begin",
         path, name, entry.begin, entry.end);
  // shape x dtype size, without overflow (dims come from the file).
  unsigned __int128 expected = dtype_size(entry.dtype);
  for (int64_t d : dims) {
    expected *= static_cast<uint64_t>(d);
    if (expected >> 64) break;
  }
  if (expected != entry.end - entry.begin)
    fail(
        "safetensors: file '{}': tensor '{}' of dtype {} and shape {} needs {} bytes, but its "
        "data_offsets [{}, {}] span {}",
        path, name, dtype_name(entry.dtype), entry.shape,
        (expected >> 64) ? std::string("more than 2^64") : std::to_string(uint64_t(expected)),
        entry.begin, entry.end, entry.end - entry.begin);
  return entry;
}

}  // namespace

bool SafetensorsFile::contains(std::string_view name) const {
  return std::any_of(tensors.begin(), tensors.end(),
                     [&](const auto& t) { return t.first == name; });
}

const Tensor& SafetensorsFile::at(std::string_view name) const {
  for (const auto& [key, tensor] : tensors)
    if (key == name) return tensor;
  fail("safetensors: file '{}' has no tensor '{}' ({} tensors in the file)", path, name,
       tensors.size());
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson meta = OrderedJson::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[std::string(kMetadataKey)] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == kMetadataKey)
      fail("safetensors: cannot save '{}': tensor name '{}' is reserved or empty", path, name);
    if (header.contains(name))
      fail("safetensors: cannot save '{}': tensor name '{}' appears twice", path, name);
    if (!tensor.defined())
      fail("safetensors: cannot save '{}': tensor '{}' is undefined", path, name);
    const uint64_t bytes = tensor.nbytes();
    header[name] = OrderedJson{{"dtype", dtype_name(tensor.dtype())},
                               {"shape", tensor.shape().dims()},
                               {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception& e) {
    fail("safetensors: cannot save '{}': a tensor name or metadata string is not valid UTF-8 ({})",
         path, e.what());
  }
  json.resize((json.size() + 7) / 8 * 8, ' ');
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(uint64_t{json.size()} >> (8 * i));
  write_file_atomically(path, [&](FileSink& sink) {
    sink.write(length, sizeof length);
    sink.write(json);
    for (const auto& entry : tensors) sink.write(entry.second.raw(), entry.second.nbytes());
  });
}

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  const std::string& p = path_;
  File file(p);
  const uint64_t file_size = file.size();
  if (file_size < 8)
    fail("safetensors: file '{}' is truncated: {} bytes, expected at least 8 for the header length",
         p, file_size);
  uint8_t length_bytes[8];
  file.read(length_bytes, 8, 0, "the header length");
  uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= uint64_t{length_bytes[i]} << (8 * i);
  if (header_size > file_size - 8)
    fail(
        "safetensors: file '{}' is corrupt or truncated: header length {} exceeds the {} bytes "
        "after the length field",
        p, header_size, file_size - 8);
  if (header_size > kMaxHeaderBytes)
    fail("safetensors: file '{}' has a header of {} bytes, expected at most {}", p, header_size,
         kMaxHeaderBytes);
  std::string text(header_size, '\0');
  file.read(text.data(), header_size, 8, "the header");

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("safetensors: file '{}' has a malformed JSON header: {}", p, e.what());
  }
  if (!header.is_object())
    fail("safetensors: file '{}' has header {}, expected a JSON object", p,
         header.dump().substr(0, 80));

  for (const auto& [name, info] : header.items()) {
    if (name == kMetadataKey) {
      if (!info.is_object())
        fail("safetensors: file '{}' has __metadata__ {}, expected an object of strings", p,
             info.dump().substr(0, 80));
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string())
          fail("safetensors: file '{}' has metadata '{}' = {}, expected a string", p, key,
               value.dump().substr(0, 80));
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    entries_.push_back(parse_entry(name, info, p));
  }

  // The tensors must tile the data section exactly, in offset order.
  std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  data_start_ = 8 + header_size;
  const uint64_t data_size = file_size - data_start_;
  uint64_t expected_begin = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries_) {
    if (e.begin < expected_begin)
      fail("safetensors: file '{}': tensor '{}' data_offsets [{}, {}] overlap tensor '{}' [{}, {}]",
           p, e.name, e.begin, e.end, previous->name, previous->begin, previous->end);
    if (e.begin > expected_begin)
      fail(
          "safetensors: file '{}': tensor '{}' begins at data offset {}, expected {} (a gap of {} "
          "bytes)",
          p, e.name, e.begin, expected_begin, e.begin - expected_begin);
    if (e.end > data_size)
      fail(
          "safetensors: file '{}' is truncated: tensor '{}' data_offsets [{}, {}] run past the {} "
          "bytes of data",
          p, e.name, e.begin, e.end, data_size);
    expected_begin = e.end;
    previous = &e;
  }
  if (expected_begin != data_size)
    fail("safetensors: file '{}' has {} bytes of data after the last tensor, expected none", p,
         data_size - expected_begin);
}

bool SafetensorsReader::contains(std::string_view name) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.name == name; });
}

const Entry& SafetensorsReader::entry(std::string_view name) const {
  for (const Entry& e : entries_)
    if (e.name == name) return e;
  fail("safetensors: file '{}' has no tensor '{}' ({} tensors in the file)", path_, name, entries_.size());
}

Tensor SafetensorsReader::read(std::string_view name) const {
  const Entry& e = entry(name);
  Tensor tensor = Tensor::empty(e.shape, e.dtype);
  if (tensor.nbytes() > 0)
    File(path_).read(tensor.raw(), tensor.nbytes(), data_start_ + e.begin, fmt::format("tensor '{}'", e.name));
  return tensor;
}

SafetensorsFile load_safetensors(const std::string& path) {
  const SafetensorsReader reader(path);
  SafetensorsFile out;
  out.path = path;
  out.metadata = reader.metadata();
  for (const Entry& e : reader.entries()) out.tensors.emplace_back(e.name, reader.read(e.name));
  return out;
}

}  // namespace px
