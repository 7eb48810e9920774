#include "comm/communicator.h"

#include <atomic>

#include <sched.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <thread>

#include <fmt/ranges.h>

#include "comm/cost_model.h"
#include "comm/shared_memory.h"
#include "core/error.h"

namespace px::comm {

std::string Transport::failure() const {
  if (declared_.load(std::memory_order_acquire)) {
    std::lock_guard lock(declared_mutex_);
    return declared_reason_;
  }
  return backend_failure();
}

void Transport::declare_failure(const std::string& reason) {
  std::lock_guard lock(declared_mutex_);
  if (declared_.load(std::memory_order_relaxed)) return;  // the first reason stays
  declared_reason_ = reason;
  declared_.store(true, std::memory_order_release);
}
namespace {

// Tag layout (31 bits): context id (10 bits) | call sequence (21 bits). The
// sequence wraps; calls 2^21 apart never have messages in flight together.
constexpr int kSequenceBits = 21;
constexpr uint32_t kSequenceMask = (1u << kSequenceBits) - 1;
constexpr int kMaxContexts = 1 << 10;

}  // namespace

struct Communicator::State {
  std::shared_ptr<Transport> transport;
  std::vector<int> members;  // world ranks, by group rank
  int rank = 0;
  int context = 0;
  uint32_t sequence = 0;
  CommunicatorOptions options;
  std::shared_ptr<const CostModel> cost_model;
  bool shared_memory_probed = false;
  std::unique_ptr<SharedMemoryGroup> shared_memory;
  // ranks_per_node -> {node group, leader group or null}
  std::map<int, std::pair<std::unique_ptr<Communicator>, std::unique_ptr<Communicator>>> nodes;
  std::vector<int> hosts;  // empty until hosts() asked
  std::vector<std::vector<char>> scratch;
  std::atomic<uint64_t> bytes_sent{0};
};

Communicator::Communicator(std::shared_ptr<Transport> transport, CommunicatorOptions options)
    : state_(std::make_shared<State>()) {
  PX_CHECK(transport != nullptr);
  state_->members.resize(transport->size());
  std::iota(state_->members.begin(), state_->members.end(), 0);
  state_->rank = transport->rank();
  state_->context = 0;
  state_->options = options;
  state_->cost_model = std::make_shared<CostModel>(default_cost_model(transport->name()));
  state_->transport = std::move(transport);
}

int Communicator::rank() const { return state_->rank; }
int Communicator::size() const { return static_cast<int>(state_->members.size()); }
int Communicator::world_rank(int rank) const { return state_->members.at(rank); }
std::span<const int> Communicator::members() const { return state_->members; }
Transport& Communicator::transport() { return *state_->transport; }
std::string_view Communicator::backend() const { return state_->transport->name(); }
std::chrono::milliseconds Communicator::timeout() const { return state_->options.timeout; }
void Communicator::set_timeout(std::chrono::milliseconds timeout) {
  state_->options.timeout = timeout;
}

uint32_t Communicator::next_tag() {
  uint32_t sequence = state_->sequence++ & kSequenceMask;
  return (static_cast<uint32_t>(state_->context) << kSequenceBits) | sequence;
}

uint32_t Communicator::fixed_tag(uint32_t index) const {
  PX_CHECK_LE(index, kSequenceMask);
  return (static_cast<uint32_t>(state_->context) << kSequenceBits) | index;
}

Request Communicator::isend(int peer, uint32_t tag, const void* data, size_t bytes) {
  state_->bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
  return state_->transport->isend(world_rank(peer), tag, data, bytes);
}
uint64_t Communicator::bytes_sent() const { return state_->bytes_sent.load(std::memory_order_relaxed); }
void Communicator::count_sent(uint64_t bytes) { state_->bytes_sent.fetch_add(bytes, std::memory_order_relaxed); }

Request Communicator::irecv(int peer, uint32_t tag, void* data, size_t bytes) {
  return state_->transport->irecv(world_rank(peer), tag, data, bytes);
}

std::string Communicator::peer_name(int rank) const {
  int world = world_rank(rank);
  if (world == rank) return fmt::format("peer rank {}", rank);
  return fmt::format("peer rank {} (world rank {})", rank, world);
}

void Communicator::wait(Request& request, const Step& step) {
  if (request.done) return;
  int peer = static_cast<int>(std::find(state_->members.begin(), state_->members.end(),
                                        request.peer) -
                              state_->members.begin());
  auto done = [&] {
    try {
      return state_->transport->test(request);
    } catch (const Error& error) {
      // e.g. the MPI library reporting a lost connection: name the peer too.
      fail("{} step {} on rank {}: {}: {}", step.collective, step.index, rank(), peer_name(peer),
           error.what());
    }
  };
  spin_until(done, peer, step, "did not answer");
  request.done = true;
}

void Communicator::wait_all(std::span<Request> requests, const Step& step) {
  for (Request& request : requests) wait(request, step);
}

Communicator::Spinner::Spinner(Communicator& comm)
    : comm_(comm), start_(std::chrono::steady_clock::now()) {}

void Communicator::Spinner::pause(int peer, const Step& step, std::string_view what) {
  // Busy-poll briefly (a blocking wake-up costs ~30 us in this VM), then
  // yield so oversubscribed ranks (more ranks than cores) still progress,
  // then sleep, longer each time up to kLongestSleep: a wait that outlasts
  // kYieldFor stops using the CPU, which a rank under a CPU quota (a
  // slower host: scripts/hosts.sh --cpu) would otherwise spend polling
  // instead of computing, and which ranks sharing the cores can use. A
  // wait is then noticed at most one sleep late, and a long one at most
  // kLongestSleep late.
  constexpr auto kYieldFor = std::chrono::microseconds(100);
  constexpr int kLongestSleep = 500;  // microseconds
  ++spins_;
  if (spins_ < 256) {
    __builtin_ia32_pause();
    return;
  }
  if (sleep_us_ == 0) {
    sched_yield();
    if (std::chrono::steady_clock::now() - start_ > kYieldFor) sleep_us_ = 10;
    if (spins_ % 64 != 0) return;
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    sleep_us_ = std::min(2 * sleep_us_, kLongestSleep);
  }
  std::string failure = comm_.state_->transport->failure();
  auto waited = std::chrono::steady_clock::now() - start_;
  // Say whom this rank itself was waiting on: when a timeout elsewhere
  // accuses a rank that was only waiting behind the stuck one, the accused
  // rank's own error names the one it waited on (a wait-for chain a person
  // or the doctor can follow to the rank that stopped).
  if (!failure.empty())
    fail("{} step {} on rank {} stopped while waiting {} ms on {}: {}", step.collective, step.index,
         comm_.rank(), std::chrono::duration_cast<std::chrono::milliseconds>(waited).count(),
         comm_.peer_name(peer), failure);
  if (waited > comm_.timeout())
    fail("{} step {} on rank {}: {} {} within the {} ms timeout", step.collective, step.index,
         comm_.rank(), comm_.peer_name(peer), what, comm_.timeout().count());
}

Communicator Communicator::split(int color, int key) {
  if (color < 0) fail("Communicator::split: color {} is negative; expected >= 0", color);
  Transport& transport = *state_->transport;
  // Exchange (color, key, next free context) with every member.
  using Entry = std::array<int, 3>;
  std::vector<Entry> entries(size());
  entries[rank()] = {color, key, transport.next_free_context};
  uint32_t tag = next_tag();
  Step step{"split", 0};
  std::vector<Request> requests;
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank()) continue;
    requests.push_back(irecv(peer, tag, &entries[peer], sizeof(Entry)));
    requests.push_back(isend(peer, tag, &entries[rank()], sizeof(Entry)));
  }
  wait_all(requests, step);

  // A context no member of the parent uses: every member's next free id is
  // above all ids it uses, so their maximum is free on all of them.
  int context = 0;
  for (const Entry& entry : entries) context = std::max(context, entry[2]);
  if (context >= kMaxContexts)
    fail("Communicator::split: {} communicators created; at most {} are supported", context,
         kMaxContexts - 1);
  transport.next_free_context = context + 1;

  std::vector<int> group;  // parent ranks with my color
  for (int r = 0; r < size(); ++r)
    if (entries[r][0] == color) group.push_back(r);
  std::stable_sort(group.begin(), group.end(),
                   [&](int a, int b) { return entries[a][1] < entries[b][1]; });
  auto child = std::make_shared<State>();
  child->transport = state_->transport;
  child->context = context;
  child->options = state_->options;
  child->cost_model = state_->cost_model;
  for (int i = 0; i < static_cast<int>(group.size()); ++i) {
    child->members.push_back(world_rank(group[i]));
    if (group[i] == rank()) child->rank = i;
  }
  transport.open_context(context, child->members);
  return Communicator(std::move(child));
}

Communicator Communicator::view(std::span<const int> ranks, uint32_t sequence) const {
  auto child = std::make_shared<State>();
  child->transport = state_->transport;
  child->context = state_->context;
  child->sequence = sequence;
  child->options = state_->options;
  child->cost_model = state_->cost_model;
  child->shared_memory_probed = true;  // none: mapping one is collective
  child->rank = -1;
  for (const int r : ranks) {
    if (r < 0 || r >= size()) fail("Communicator::view: rank {} is not in this group of {}", r, size());
    if (r == rank()) child->rank = static_cast<int>(child->members.size());
    child->members.push_back(world_rank(r));
  }
  if (child->rank < 0) fail("Communicator::view: this rank ({}) is not among [{}]", rank(), fmt::join(ranks, ", "));
  return Communicator(std::move(child));
}

SharedMemoryGroup* Communicator::shared_memory() {
  if (!state_->shared_memory_probed) {
    state_->shared_memory_probed = true;
    state_->shared_memory = SharedMemoryGroup::create(*this);
  }
  return state_->shared_memory.get();
}

const std::vector<int>& Communicator::hosts() {
  std::vector<int>& hosts = state_->hosts;
  if (!hosts.empty()) return hosts;
  std::vector<uint64_t> ids(static_cast<size_t>(size()));
  ids[static_cast<size_t>(rank())] = transport().host_id();
  if (size() > 1) {
    const uint32_t tag = next_tag();
    std::vector<Request> requests;
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == rank()) continue;
      requests.push_back(irecv(peer, tag, &ids[static_cast<size_t>(peer)], sizeof(uint64_t)));
      requests.push_back(isend(peer, tag, &ids[static_cast<size_t>(rank())], sizeof(uint64_t)));
    }
    wait_all(requests, Step{"hosts", 0});
  }
  std::vector<uint64_t> seen;
  for (uint64_t id : ids) {
    auto it = std::find(seen.begin(), seen.end(), id);
    hosts.push_back(static_cast<int>(it - seen.begin()));
    if (it == seen.end()) seen.push_back(id);
  }
  return hosts;
}

std::pair<Communicator*, Communicator*> Communicator::node_groups(int ranks_per_node) {
  auto it = state_->nodes.find(ranks_per_node);
  if (it == state_->nodes.end()) {
    // Nodes are blocks of ranks_per_node consecutive ranks, or (0) the ranks
    // sharing a host. Node leaders are each node's rank 0.
    const int node = ranks_per_node > 0 ? rank() / ranks_per_node : hosts()[static_cast<size_t>(rank())];
    auto node_comm = std::make_unique<Communicator>(split(node, rank()));
    bool leader = node_comm->rank() == 0;
    auto leaders = std::make_unique<Communicator>(split(leader ? 0 : 1, rank()));
    if (!leader) leaders.reset();
    it = state_->nodes.emplace(ranks_per_node, std::make_pair(std::move(node_comm),
                                                              std::move(leaders)))
             .first;
  }
  return {it->second.first.get(), it->second.second.get()};
}

void* Communicator::scratch(size_t bytes, int index) {
  auto& buffers = state_->scratch;
  if (static_cast<int>(buffers.size()) <= index) buffers.resize(index + 1);
  if (buffers[index].size() < bytes) buffers[index].resize(bytes);
  return buffers[index].data();
}

const CostModel& Communicator::cost_model() const { return *state_->cost_model; }
void Communicator::set_cost_model(std::shared_ptr<const CostModel> model) {
  state_->cost_model = std::move(model);
}

}  // namespace px::comm
