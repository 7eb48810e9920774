#include "runtime/fault/watchdog_peers.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "core/error.h"

namespace px {
namespace {

// Layout: fixed fields, then two strings (a 16-bit length and the bytes),
// the instruction's name cut at kNameBytes, the verdict at what is left.
constexpr uint32_t kNewsMagic = 0x50584842;  // "PXHB"
constexpr size_t kNameBytes = 96;

class Writer {
 public:
  explicit Writer(std::vector<std::byte>& out) : out_(out) {}
  template <typename T>
  void put(T value) {
    PX_CHECK_LE(at_ + sizeof(T), out_.size());
    std::memcpy(out_.data() + at_, &value, sizeof(T));
    at_ += sizeof(T);
  }
  void put(std::string_view text, size_t most) {
    text = text.substr(0, std::min({most, out_.size() - at_ - sizeof(uint16_t), size_t{UINT16_MAX}}));
    put(static_cast<uint16_t>(text.size()));
    std::memcpy(out_.data() + at_, text.data(), text.size());
    at_ += text.size();
  }
  size_t left() const { return out_.size() - at_; }

 private:
  std::vector<std::byte>& out_;
  size_t at_ = 0;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  template <typename T>
  T get() {
    T value{};
    if (at_ + sizeof(T) > in_.size()) {
      bad_ = true;
      return value;
    }
    std::memcpy(&value, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::string text() {
    const size_t length = get<uint16_t>();
    if (bad_ || at_ + length > in_.size()) {
      bad_ = true;
      return {};
    }
    std::string out(reinterpret_cast<const char*>(in_.data() + at_), length);
    at_ += length;
    return out;
  }
  bool bad() const { return bad_; }

 private:
  std::span<const std::byte> in_;
  size_t at_ = 0;
  bool bad_ = false;
};

}  // namespace

std::vector<std::byte> encode_news(const WatchdogNews& news) {
  std::vector<std::byte> out(TransportPeers::kMessageBytes);
  Writer w(out);
  w.put(kNewsMagic);
  w.put(news.pulse.heartbeat);
  w.put(news.pulse.step);
  w.put(static_cast<int32_t>(news.pulse.instr));
  w.put(static_cast<uint8_t>(news.pulse.phase));
  w.put(static_cast<int32_t>(news.suspect));
  w.put(news.suspect_heard_ns);
  w.put(news.pulse.instr_name, kNameBytes);
  w.put(news.verdict, w.left());
  return out;
}

std::optional<WatchdogNews> decode_news(std::span<const std::byte> bytes) {
  Reader r(bytes);
  if (r.get<uint32_t>() != kNewsMagic) return std::nullopt;
  WatchdogNews news;
  news.pulse.heartbeat = r.get<uint64_t>();
  news.pulse.step = r.get<int64_t>();
  news.pulse.instr = r.get<int32_t>();
  news.pulse.phase = static_cast<RankPhase>(r.get<uint8_t>());
  news.suspect = r.get<int32_t>();
  news.suspect_heard_ns = r.get<int64_t>();
  news.pulse.instr_name = r.text();
  news.verdict = r.text();
  if (r.bad()) return std::nullopt;
  return news;
}

TransportPeers::TransportPeers(comm::Communicator& world) : heartbeats_(world, kMessageBytes) {}

void TransportPeers::exchange(const WatchdogNews& mine) { heartbeats_.exchange(encode_news(mine)); }
void TransportPeers::receive() { heartbeats_.receive(); }
bool TransportPeers::delivered() { return heartbeats_.delivered(); }

std::optional<WatchdogNews> TransportPeers::heard(int rank) const {
  const std::span<const std::byte> latest = heartbeats_.latest(rank);
  if (latest.empty()) return std::nullopt;
  return decode_news(latest);
}

}  // namespace px
