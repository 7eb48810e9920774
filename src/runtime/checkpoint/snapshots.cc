#include "runtime/checkpoint/snapshots.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <fmt/ranges.h>

#include "core/error.h"

namespace px {
namespace {

// A snapshot on the wire: a JSON header (step, state, each run's name and
// box, each compression tensor's name, dtype and shape), then the tensors'
// bytes in that order.
struct Packed {
  std::string header;
  std::vector<char> bytes;
};

Packed pack(const RankSnapshot& s) {
  nlohmann::json runs = nlohmann::json::array(), compression = nlohmann::json::array();
  size_t total = 0;
  for (const SavedRun& r : s.runs) {
    runs.push_back({{"name", r.name}, {"run", shard_run_json(r.run)}});
    total += r.values.nbytes();
  }
  for (const auto& [name, t] : s.compression) {
    compression.push_back({{"name", name}, {"dtype", dtype_name(t.dtype())}, {"shape", t.shape().dims()}});
    total += t.nbytes();
  }
  Packed p{.header = nlohmann::json{{"step", s.step}, {"state", s.state.to_json()}, {"runs", runs},
                                    {"compression", compression}}
                         .dump(),
           .bytes = std::vector<char>(total)};
  char* at = p.bytes.data();
  auto put = [&](const Tensor& t) {
    std::memcpy(at, t.raw(), t.nbytes());
    at += t.nbytes();
  };
  for (const SavedRun& r : s.runs) put(r.values);
  for (const auto& [name, t] : s.compression) put(t);
  return p;
}

RankSnapshot unpack(const std::string& header, const std::vector<char>& bytes, int from) {
  const nlohmann::json h = nlohmann::json::parse(header);
  const std::string where = fmt::format("rank {}'s snapshot", from);
  RankSnapshot s{.step = h.at("step").get<int64_t>(), .state = CheckpointState::from_json(h.at("state"), where, false)};
  const char* at = bytes.data();
  auto take = [&](Tensor t) {
    PX_CHECK(at + t.nbytes() <= bytes.data() + bytes.size(), "rank {}'s snapshot is shorter than its header says",
             from);
    std::memcpy(t.raw(), at, t.nbytes());
    at += t.nbytes();
    return t;
  };
  for (const nlohmann::json& r : h.at("runs")) {
    parallel::ShardRun run = shard_run_from_json(r.at("run").dump(), r.at("name"), where);
    Tensor values = take(Tensor::empty(Shape{run.count()}, DType::f32));
    s.runs.push_back({r.at("name").get<std::string>(), std::move(run), std::move(values)});
  }
  for (const nlohmann::json& c : h.at("compression"))
    s.compression.emplace_back(
        c.at("name").get<std::string>(),
        take(Tensor::empty(Shape(c.at("shape").get<std::vector<int64_t>>()),
                           dtype_from_name(c.at("dtype").get<std::string>()))));
  return s;
}

}  // namespace

std::optional<RankSnapshot> exchange_with_buddy(comm::Communicator& world, const RankSnapshot& own) {
  const int n = world.size();
  if (n == 1) return std::nullopt;
  const int next = (world.rank() + 1) % n, prev = (world.rank() + n - 1) % n;
  const Packed mine = pack(own);
  const comm::Step step{.collective = "snapshot to the buddy rank"};
  // Sizes first, then the header and the bytes.
  const uint32_t tag = world.next_tag();
  uint64_t sizes[2] = {mine.header.size(), mine.bytes.size()}, theirs[2] = {0, 0};
  std::vector<comm::Request> requests{world.isend(next, tag, sizes, sizeof sizes),
                                      world.irecv(prev, tag, theirs, sizeof theirs)};
  world.wait_all(requests, step);
  std::string header(theirs[0], '\0');
  std::vector<char> bytes(theirs[1]);
  const uint32_t data_tag = world.next_tag();
  requests = {world.isend(next, data_tag, mine.header.data(), mine.header.size()),
              world.isend(next, data_tag, mine.bytes.data(), mine.bytes.size()),
              world.irecv(prev, data_tag, header.data(), header.size()),
              world.irecv(prev, data_tag, bytes.data(), bytes.size())};
  world.wait_all(requests, step);
  return unpack(header, bytes, prev);
}

void SnapshotStore::keep(int rank, RankSnapshot own, std::optional<RankSnapshot> buddy_copy) {
  std::lock_guard lock(mutex_);
  auto put = [&](int whose, RankSnapshot s) {
    // Drop the older generation of (whose, holder) once two are held.
    std::vector<size_t> same;
    for (size_t i = 0; i < held_.size(); ++i)
      if (held_[i].rank == whose && held_[i].holder == rank) same.push_back(i);
    if (same.size() >= 2) {
      const size_t oldest = *std::min_element(same.begin(), same.end(), [&](size_t a, size_t b) {
        return held_[a].snapshot.step < held_[b].snapshot.step;
      });
      held_.erase(held_.begin() + static_cast<long>(oldest));
    }
    held_.push_back({whose, rank, std::move(s)});
  };
  put(rank, std::move(own));
  if (buddy_copy) put((rank + ranks_ - 1) % ranks_, std::move(*buddy_copy));
}

void SnapshotStore::lose(int rank) {
  std::lock_guard lock(mutex_);
  std::erase_if(held_, [&](const Held& h) { return h.holder == rank; });
}

std::optional<Checkpoint> SnapshotStore::restore() const {
  std::lock_guard lock(mutex_);
  std::set<int64_t, std::greater<>> steps;
  for (const Held& h : held_) steps.insert(h.snapshot.step);
  for (int64_t step : steps) {
    std::vector<const Held*> found(static_cast<size_t>(ranks_), nullptr);
    for (const Held& h : held_)
      if (h.snapshot.step == step && (found[static_cast<size_t>(h.rank)] == nullptr || h.holder == h.rank))
        found[static_cast<size_t>(h.rank)] = &h;  // its own copy first
    if (std::count(found.begin(), found.end(), nullptr) > 0) continue;
    std::vector<SavedRun> runs;
    std::vector<std::string> from_buddies;
    Checkpoint c;
    for (const Held* h : found) {
      runs.insert(runs.end(), h->snapshot.runs.begin(), h->snapshot.runs.end());
      if (h->holder != h->rank) from_buddies.push_back(fmt::format("rank {}'s from rank {}", h->rank, h->holder));
      if (!h->snapshot.compression.empty()) c.compression = SafetensorsFile{.tensors = h->snapshot.compression};
    }
    c.state = found[0]->snapshot.state;
    c.dir = fmt::format("memory{}",
                        from_buddies.empty() ? std::string()
                                             : fmt::format(" ({} copy)", fmt::join(from_buddies, ", ")));
    c.shards = ShardedTensors(runs, c.dir);
    return c;
  }
  return std::nullopt;
}

}  // namespace px
