#include "serve/text_stream.h"

#include <algorithm>

#include "core/error.h"

namespace px::serve {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed sequence at the start of `s` (1-4), 0 if
// its first bytes are ill-formed, or -1 if they are a valid but incomplete
// start (Unicode 15, table 3-7). `*bad` is the maximal subpart's length
// when 0 is returned.
int sequence_at(std::string_view s, size_t* bad) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  *bad = 1;
  if (b0 < 0x80) return 1;
  int length = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (b0 >= 0xC2 && b0 <= 0xDF) length = 2;
  else if (b0 == 0xE0) length = 3, lo = 0xA0;
  else if (b0 >= 0xE1 && b0 <= 0xEC) length = 3;
  else if (b0 == 0xED) length = 3, hi = 0x9F;
  else if (b0 >= 0xEE && b0 <= 0xEF) length = 3;
  else if (b0 == 0xF0) length = 4, lo = 0x90;
  else if (b0 >= 0xF1 && b0 <= 0xF3) length = 4;
  else if (b0 == 0xF4) length = 4, hi = 0x8F;
  else return 0;
  for (int i = 1; i < length; ++i) {
    if (static_cast<size_t>(i) >= s.size()) return -1;
    const auto b = static_cast<unsigned char>(s[static_cast<size_t>(i)]);
    const unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *bad = static_cast<size_t>(i);
      return 0;
    }
  }
  return length;
}

}  // namespace

std::string to_utf8(std::string_view bytes, bool final, size_t* used) {
  std::string out;
  size_t i = 0;
  while (i < bytes.size()) {
    size_t bad = 1;
    const int n = sequence_at(bytes.substr(i), &bad);
    if (n > 0) {
      out.append(bytes.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    } else if (n < 0 && !final) {
      break;  // may complete with the next bytes
    } else {
      out.append(kReplacement);
      i += n < 0 ? bytes.size() - i : bad;
    }
  }
  if (used) *used = i;
  return out;
}

bool is_valid_utf8(std::string_view text) {
  size_t used = 0;
  return to_utf8(text, true, &used) == text;
}

TextStream::TextStream(std::vector<std::string> stop) : stop_(std::move(stop)) {
  for (const std::string& s : stop_) PX_CHECK(!s.empty(), "an empty stop sequence");
}

std::string TextStream::push(char byte) {
  PX_CHECK(!stopped_, "a byte pushed after the stop sequence");
  bytes_.push_back(byte);
  // A stop sequence that completes with this byte: it ends within the
  // bytes not emitted yet (a tail that could start one is never emitted).
  for (const std::string& s : stop_) {
    if (bytes_.size() < s.size() || bytes_.compare(bytes_.size() - s.size(), s.size(), s) != 0) continue;
    stopped_ = true;
    bytes_.resize(bytes_.size() - s.size());
    return finish();
  }
  // Hold back the longest tail that begins some stop sequence.
  size_t held = 0;
  for (const std::string& s : stop_)
    for (size_t k = std::min(s.size() - 1, bytes_.size() - emitted_); k > held; --k)
      if (bytes_.compare(bytes_.size() - k, k, s, 0, k) == 0) {
        held = k;
        break;
      }
  size_t used = 0;
  const std::string text = to_utf8(std::string_view(bytes_).substr(emitted_, bytes_.size() - held - emitted_), false, &used);
  emitted_ += used;
  return text;
}

std::string TextStream::finish() {
  const std::string text = to_utf8(std::string_view(bytes_).substr(emitted_), true);
  emitted_ = bytes_.size();
  return text;
}

}  // namespace px::serve
