#include "runtime/fault/flight_recorder.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"

namespace px {
namespace {

constexpr char kMagic[8] = {'P', 'X', 'F', 'L', 'I', 'G', 'H', 'T'};
constexpr uint32_t kVersion = 2;

int64_t wall_ns() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}


template <typename T>
std::atomic_ref<T> atomic(T& value) {
  return std::atomic_ref<T>(value);
}

// A rank's thread writes its record while watchdogs (this process's and
// other ranks') read it, so every field written after construction is
// written and read with relaxed atomic accesses: each number is seen whole,
// and the access is defined (ThreadSanitizer found the plain ones). A text
// field read during a rewrite may mix two texts; the readers are
// diagnostics, and the slot's number says whether an event was whole.
template <typename T>
void store(T& field, T value) {
  atomic(field).store(value, std::memory_order_relaxed);
}
template <typename T>
T load(const T& field) {
  return atomic(const_cast<T&>(field)).load(std::memory_order_relaxed);
}

// Copies `text` into a fixed field, always NUL-terminated.
template <size_t N>
void put(char (&field)[N], std::string_view text) {
  const size_t n = std::min(text.size(), N - 1);
  for (size_t i = 0; i < n; ++i) store(field[i], text[i]);
  store(field[n], '\0');
}

template <size_t N>
std::string get(const char (&field)[N]) {
  std::string text;
  for (size_t i = 0; i < N; ++i) {
    const char c = load(field[i]);
    if (c == '\0') break;
    text.push_back(c);
  }
  return text;
}

}  // namespace

// The file's layout: plain data, the same in every process of one build.
struct FlightRecorder::Header {
  char magic[8];
  uint32_t version;
  uint32_t capacity;
  int32_t rank, world;
  int64_t pid;
  uint64_t heartbeat;
  int64_t heartbeat_ns;
  uint64_t events;  // events ever posted
  int64_t step;
  int32_t instr;
  uint8_t phase;
  uint8_t pad[3];
  int64_t instr_ns;
  char instr_name[64];
  char error[1024];
  int32_t suspect;  // the rank this one's watchdog declared silent (-1: none)
  uint32_t pad2;
  int64_t suspect_heard_ns;  // when that rank's heartbeat last moved, as the watchdog saw it
};

struct FlightRecorder::Slot {
  uint64_t number;  // which event the slot holds (+1: 0 is empty)
  uint64_t sequence;
  int64_t step;
  int32_t instr, peer;
  uint64_t bytes;
  int64_t posted_ns, done_ns;
  uint8_t kind, state;
  char axis[14];
  char name[48];
};

std::string_view flight_state_name(FlightState state) {
  switch (state) {
    case FlightState::posted: return "posted";
    case FlightState::done: return "done";
    case FlightState::failed: return "failed";
  }
  return "?";
}

std::string_view rank_phase_name(RankPhase phase) {
  switch (phase) {
    case RankPhase::starting: return "starting";
    case RankPhase::running: return "running";
    case RankPhase::failed: return "failed";
    case RankPhase::finished: return "finished";
    case RankPhase::frozen: return "frozen";
    case RankPhase::killed: return "killed";
    case RankPhase::lost: return "lost";
  }
  return "?";
}

std::string describe_position(int64_t step, int instr, const std::string& name) {
  if (step < 0) return "before its first step";
  if (instr < 0) return fmt::format("the start of step {}", step);
  return name.empty() ? fmt::format("step {}, instruction #{}", step, instr)
                      : fmt::format("step {}, instruction #{} '{}'", step, instr, name);
}

std::string flight_path(const std::string& run_dir, int rank) {
  return (std::filesystem::path(run_dir) / "flight" / fmt::format("rank{}", rank)).string();
}

FlightRecorder::FlightRecorder(const std::string& path, int rank, int world, size_t capacity)
    : path_(path), capacity_(capacity) {
  PX_CHECK(capacity > 0);
  bytes_ = sizeof(Header) + capacity * sizeof(Slot);
  if (path.empty()) {
    base_ = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  } else {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) fail("cannot create the flight record '{}': {}", path, std::strerror(errno));
    if (ftruncate(fd, static_cast<off_t>(bytes_)) != 0) {
      close(fd);
      fail("cannot size the flight record '{}' to {} bytes: {}", path, bytes_, std::strerror(errno));
    }
    base_ = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
  }
  if (base_ == MAP_FAILED) fail("cannot map the flight record '{}': {}", path, std::strerror(errno));
  Header* h = header();
  std::memset(h, 0, sizeof(Header));
  h->version = kVersion;
  h->capacity = static_cast<uint32_t>(capacity);
  h->rank = rank;
  h->world = world;
  h->pid = getpid();
  h->step = -1;
  h->suspect = -1;
  h->instr = -1;
  h->phase = static_cast<uint8_t>(RankPhase::starting);
  h->heartbeat_ns = wall_ns();
  std::memcpy(h->magic, kMagic, sizeof(kMagic));  // last: a reader sees a whole header or none
}

FlightRecorder::~FlightRecorder() {
  if (base_ != nullptr && base_ != MAP_FAILED) munmap(base_, bytes_);
}

FlightRecorder::Header* FlightRecorder::header() const { return static_cast<Header*>(base_); }

FlightRecorder::Slot* FlightRecorder::slot(uint64_t number) const {
  return reinterpret_cast<Slot*>(static_cast<char*>(base_) + sizeof(Header)) + number % capacity_;
}

void FlightRecorder::at(int64_t step, int instr, std::string_view name) {
  Header* h = header();
  store(h->step, step);
  store(h->instr, instr);
  store(h->instr_ns, wall_ns());
  put(h->instr_name, name);
}

uint64_t FlightRecorder::post(FlightKind kind, std::string_view axis, uint64_t sequence, int64_t step, int instr,
                              std::string_view name, uint64_t bytes, int peer) {
  Header* h = header();
  const uint64_t number = atomic(h->events).fetch_add(1);
  Slot* s = slot(number);
  atomic(s->number).store(0);  // being rewritten
  store(s->sequence, sequence);
  store(s->step, step);
  store(s->instr, instr);
  store(s->peer, peer);
  store(s->bytes, bytes);
  store(s->posted_ns, wall_ns());
  store(s->done_ns, int64_t{0});
  store(s->kind, static_cast<uint8_t>(kind));
  store(s->state, static_cast<uint8_t>(FlightState::posted));
  put(s->axis, axis);
  put(s->name, name);
  atomic(s->number).store(number + 1);
  return number;
}

void FlightRecorder::done(uint64_t number, bool ok) {
  Slot* s = slot(number);
  if (atomic(s->number).load() != number + 1) return;  // overwritten since
  store(s->done_ns, wall_ns());
  atomic(s->state).store(static_cast<uint8_t>(ok ? FlightState::done : FlightState::failed));
}

void FlightRecorder::set_phase(RankPhase phase) { atomic(header()->phase).store(static_cast<uint8_t>(phase)); }

RankPhase FlightRecorder::phase() const { return static_cast<RankPhase>(atomic(header()->phase).load()); }

void FlightRecorder::set_error(std::string_view what) { put(header()->error, what); }

void FlightRecorder::set_suspect(int rank, int64_t last_heard_ns) {
  store(header()->suspect_heard_ns, last_heard_ns);
  store(header()->suspect, rank);
}

void FlightRecorder::beat() {
  Header* h = header();
  store(h->heartbeat_ns, wall_ns());
  atomic(h->heartbeat).fetch_add(1);
}

int FlightRecorder::rank() const { return header()->rank; }

uint64_t FlightRecorder::heartbeat() const { return atomic(header()->heartbeat).load(); }

FlightRecorder::Pulse FlightRecorder::pulse() const {
  const Header* h = header();
  return {.heartbeat = heartbeat(),
          .phase = phase(),
          .step = load(h->step),
          .instr = load(h->instr),
          .instr_name = get(h->instr_name)};
}

FlightDump FlightRecorder::read() const {
  const Header* h = header();
  FlightDump d;
  d.rank = h->rank;
  d.world = h->world;
  d.pid = h->pid;
  d.heartbeat = heartbeat();
  d.heartbeat_ns = load(h->heartbeat_ns);
  d.step = load(h->step);
  d.instr = load(h->instr);
  d.instr_name = get(h->instr_name);
  d.instr_ns = load(h->instr_ns);
  d.phase = phase();
  d.error = get(h->error);
  d.suspect = load(h->suspect);
  d.suspect_heard_ns = load(h->suspect_heard_ns);
  const uint64_t events = atomic(const_cast<Header*>(h)->events).load();
  const uint64_t first = events > capacity_ ? events - capacity_ : 0;
  for (uint64_t n = first; n < events; ++n) {
    const Slot* s = slot(n);
    if (atomic(const_cast<Slot*>(s)->number).load() != n + 1) continue;  // torn: being rewritten
    d.events.push_back({.number = n,
                        .sequence = load(s->sequence),
                        .step = load(s->step),
                        .instr = load(s->instr),
                        .peer = load(s->peer),
                        .bytes = load(s->bytes),
                        .posted_ns = load(s->posted_ns),
                        .done_ns = load(s->done_ns),
                        .kind = static_cast<FlightKind>(load(s->kind)),
                        .state = static_cast<FlightState>(load(s->state)),
                        .axis = get(s->axis),
                        .name = get(s->name)});
  }
  return d;
}

namespace {

// A read-only mapping of a rank's file, or none if it does not exist yet
// or its header is not written yet.
struct Mapping {
  void* base = nullptr;
  size_t bytes = 0;
  ~Mapping() {
    if (base != nullptr) munmap(base, bytes);
  }
};

bool map_file(const std::string& path, Mapping& m) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    fail("cannot open the flight record '{}': {}", path, std::strerror(errno));
  }
  struct stat st {};
  fstat(fd, &st);
  m.bytes = static_cast<size_t>(st.st_size);
  if (m.bytes == 0) {
    close(fd);
    return false;
  }
  m.base = mmap(nullptr, m.bytes, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m.base == MAP_FAILED) {
    m.base = nullptr;
    fail("cannot map the flight record '{}': {}", path, std::strerror(errno));
  }
  return true;
}

}  // namespace

std::optional<FlightDump> FlightRecorder::read_file(const std::string& path, bool events) {
  Mapping m;
  if (!map_file(path, m)) return std::nullopt;
  const Header* h = static_cast<const Header*>(m.base);
  if (m.bytes < sizeof(Header) || std::memcmp(h->magic, kMagic, sizeof(kMagic)) != 0) {
    if (m.bytes >= sizeof(Header) && std::all_of(h->magic, h->magic + 8, [](char c) { return c == 0; }))
      return std::nullopt;  // created, header not written yet
    fail("'{}' is not a parallax flight record (expected the magic 'PXFLIGHT')", path);
  }
  if (h->version != kVersion)
    fail("flight record '{}' has version {}; this parallax reads version {}", path, h->version, kVersion);
  if (m.bytes != sizeof(Header) + h->capacity * sizeof(Slot))
    fail("flight record '{}' has {} bytes; its header says {}", path, m.bytes,
         sizeof(Header) + h->capacity * sizeof(Slot));
  // Read through a recorder-shaped view of the mapping.
  FlightRecorder view;
  view.base_ = m.base;
  view.bytes_ = m.bytes;
  view.capacity_ = h->capacity;
  view.path_ = path;
  FlightDump d;
  if (events) {
    d = view.read();
  } else {  // the header's fields only (the watchdog polls every period)
    const Pulse p = view.pulse();
    d.heartbeat = p.heartbeat;
    d.phase = p.phase;
    d.step = p.step;
    d.instr = p.instr;
    d.instr_name = p.instr_name;
  }
  view.base_ = nullptr;  // the Mapping unmaps
  return d;
}

}  // namespace px
