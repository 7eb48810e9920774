// MPI transport: ranks are MPI processes; messages are MPI_Isend/MPI_Irecv on
// a private duplicate of MPI_COMM_WORLD (so user MPI traffic never matches
// ours) for the world's communicator, and on an MPI communicator of its own
// for every communicator split from it (open_context), so the tags need
// only carry a call's sequence number, folded into MPI_TAG_UB: the standard
// guarantees 32767 (MPICH and its derivatives offer less than OpenMPI's
// 2^31 - 1). MpiOptions::tag_bound lowers the bound, to test the folding. Shared segments are MPI-3 shared windows (MPI_Win_allocate_shared)
// over the group, when all its members share a node. Native collectives call
// the library on a communicator made for the group.
//
// Threads: a rank's caller thread and its CommEngine progress thread call the
// transport concurrently. init() asks for MPI_THREAD_MULTIPLE; when the
// library grants less, every MPI call of the transport is serialized by a
// mutex (then a blocking call — a native allreduce, a shared window's
// creation — holds it until done, so two threads must not both make one).
#include <mpi.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <string_view>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/backends.h"
#include "comm/transport.h"
#include "core/error.h"

namespace px::comm {
namespace {

void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail("{} failed: {}", what, std::string(text, length));
}

struct MpiRequest : RequestState {
  MPI_Request request = MPI_REQUEST_NULL;
  bool receive = false;
  size_t bytes = 0;
};

class Window : public SharedSegment {
 public:
  Window(MPI_Comm comm, size_t bytes_per_member) : comm_(comm), bytes_(bytes_per_member) {
    int size = 0;
    MPI_Comm_size(comm_, &size);
    void* base = nullptr;
    check_mpi(MPI_Win_allocate_shared(static_cast<MPI_Aint>(bytes_), 1, MPI_INFO_NULL, comm_,
                                      &base, &window_),
              "MPI_Win_allocate_shared");
    std::memset(base, 0, bytes_);
    slots_.resize(size);
    for (int member = 0; member < size; ++member) {
      MPI_Aint length = 0;
      int unit = 0;
      check_mpi(MPI_Win_shared_query(window_, member, &length, &unit, &slots_[member]),
                "MPI_Win_shared_query");
    }
    MPI_Barrier(comm_);  // every slot zeroed before anyone reads flags
  }
  ~Window() override {
    MPI_Win_free(&window_);
    MPI_Comm_free(&comm_);
  }
  void* slot(int member) override { return slots_[member]; }
  size_t bytes_per_member() const override { return bytes_; }

 private:
  MPI_Comm comm_;
  size_t bytes_;
  MPI_Win window_ = MPI_WIN_NULL;
  std::vector<void*> slots_;
};

MPI_Op mpi_op(Reduction op) {
  switch (op) {
    case Reduction::max: return MPI_MAX;
    case Reduction::min: return MPI_MIN;
    default: return MPI_SUM;
  }
}

class MpiTransport : public Transport, public NativeCollectives {
 public:
  // serialize: the library is not MPI_THREAD_MULTIPLE; one MPI call at a time.
  MpiTransport(bool serialize, int tag_bound) : serialize_(serialize) {
    MPI_Comm_dup(MPI_COMM_WORLD, &messages_);
    MPI_Comm_dup(MPI_COMM_WORLD, &control_);
    MPI_Comm_set_errhandler(messages_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(messages_, &rank_);
    MPI_Comm_size(messages_, &size_);
    MPI_Comm_dup(MPI_COMM_WORLD, &contexts_parent_);
    int* upper = nullptr;
    int found = 0;
    MPI_Comm_get_attr(messages_, MPI_TAG_UB, &upper, &found);
    tag_bound_ = found ? *upper : 32767;  // the standard's minimum
    if (tag_bound > 0) tag_bound_ = std::min(tag_bound_, std::max(32767, tag_bound));
    char name[MPI_MAX_PROCESSOR_NAME];
    int length = 0;
    MPI_Get_processor_name(name, &length);
    host_ = std::hash<std::string>{}(std::string(name, length));
  }
  ~MpiTransport() override {
    windows_.clear();  // frees in creation order, as every member created them
    for (auto& [group, comm] : groups_) MPI_Comm_free(&comm);
    for (auto& [context, c] : contexts_) MPI_Comm_free(&c.comm);
    MPI_Comm_free(&contexts_parent_);
    MPI_Comm_free(&messages_);
    MPI_Comm_free(&control_);
  }

  std::string_view name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Request isend(int peer, uint32_t tag, const void* data, size_t bytes) override {
    auto state = std::make_shared<MpiRequest>();
    state->bytes = bytes;
    const Route route = route_of(peer, tag);
    auto lock = serialized();
    check_mpi(MPI_Isend(data, count(bytes), MPI_BYTE, route.peer, route.tag, route.comm, &state->request),
              "MPI_Isend");
    return Request{state, peer};
  }
  Request irecv(int peer, uint32_t tag, void* data, size_t bytes) override {
    auto state = std::make_shared<MpiRequest>();
    state->bytes = bytes;
    state->receive = true;
    const Route route = route_of(peer, tag);
    auto lock = serialized();
    check_mpi(MPI_Irecv(data, count(bytes), MPI_BYTE, route.peer, route.tag, route.comm, &state->request),
              "MPI_Irecv");
    return Request{state, peer};
  }

  void open_context(int context, std::span<const int> members) override {
    auto call = serialized();
    MPI_Comm comm = create_comm(contexts_parent_, members, context);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    Context c{.comm = comm, .rank_of = std::vector<int>(static_cast<size_t>(size_), -1)};
    for (size_t i = 0; i < members.size(); ++i) c.rank_of[static_cast<size_t>(members[i])] = static_cast<int>(i);
    std::lock_guard lock(contexts_mutex_);
    contexts_[context] = std::move(c);
  }
  bool test(Request& request) override {
    auto& state = static_cast<MpiRequest&>(*request.state);
    int done = 0;
    // MPI_Test need not set MPI_ERROR (only the multiple-completion calls
    // must): start from success so stale stack bytes never read as a
    // truncation.
    MPI_Status status{};
    status.MPI_ERROR = MPI_SUCCESS;
    auto lock = serialized();
    int code = MPI_Test(&state.request, &done, &status);
    if (lock.owns_lock()) lock.unlock();
    if (code == MPI_ERR_TRUNCATE || (done && state.receive && status.MPI_ERROR == MPI_ERR_TRUNCATE))
      fail("rank {} sent more than the {} bytes rank {} expected (do the ranks disagree on the "
           "collective's size or type?)",
           request.peer, state.bytes, rank_);
    check_mpi(code, "MPI_Test");
    if (done && state.receive) {
      int received = 0;
      MPI_Get_count(&status, MPI_BYTE, &received);
      if (static_cast<size_t>(received) != state.bytes)
        fail("rank {} sent {} bytes to rank {}, which expected {} (do the ranks disagree on the "
             "collective's size or type?)",
             request.peer, received, rank_, state.bytes);
    }
    return done != 0;
  }

  void cancel(Request& request) override {
    if (request.state == nullptr) return;
    auto& state = static_cast<MpiRequest&>(*request.state);
    auto lock = serialized();
    if (state.request != MPI_REQUEST_NULL) {
      // A cancelled receive completes at once; a send the library already
      // delivered may not be cancellable: freed, it completes on its own.
      MPI_Cancel(&state.request);
      int done = 0;
      for (int poll = 0; poll < 1000 && !done; ++poll) MPI_Test(&state.request, &done, MPI_STATUS_IGNORE);
      if (!done) MPI_Request_free(&state.request);
    }
    request.state.reset();
  }

  std::shared_ptr<SharedSegment> map_shared(std::span<const int> group, size_t bytes_per_member,
                                            uint32_t tag) override {
    auto lock = serialized();
    MPI_Comm comm = group_comm(group, static_cast<int>(tag));
    MPI_Comm node;
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int node_size = 0;
    MPI_Comm_size(node, &node_size);
    int all_shared = node_size == static_cast<int>(group.size()), agreed = 0;
    MPI_Allreduce(&all_shared, &agreed, 1, MPI_INT, MPI_MIN, comm);
    if (!agreed) {
      MPI_Comm_free(&node);
      return nullptr;
    }
    auto window = std::make_shared<Window>(node, bytes_per_member);
    windows_.push_back(window);
    return window;
  }

  uint64_t host_id() const override { return host_; }
  NativeCollectives* native() override { return this; }

  void allreduce(std::span<const int> group, void* data, int64_t count, DType dtype,
                 Reduction op) override {
    if (dtype != DType::f32)
      fail("allreduce(native): MPI has no {} reduction; use float32 or another algorithm",
           dtype_name(dtype));
    if (count > INT_MAX) fail("allreduce(native): {} elements exceed MPI's int count", count);
    auto lock = serialized();
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, mpi_op(op),
                            group_comm(group, 0)),
              "MPI_Allreduce");
  }

 private:
  std::unique_lock<std::mutex> serialized() {
    return serialize_ ? std::unique_lock(call_mutex_) : std::unique_lock<std::mutex>();
  }

  static int count(size_t bytes) {
    if (bytes > static_cast<size_t>(INT_MAX))
      fail("MPI message of {} bytes exceeds MPI's int count; expected < 2 GiB", bytes);
    return static_cast<int>(bytes);
  }

  // Where a message of `tag` to world rank `peer` goes: its context's MPI
  // communicator, the peer's rank there, the sequence folded into the bound.
  struct Route {
    MPI_Comm comm;
    int peer, tag;
  };
  Route route_of(int peer, uint32_t tag) {
    constexpr int kSequenceBits = 21;  // communicator.cc's tag layout
    const int context = static_cast<int>(tag >> kSequenceBits);
    // In int64: OpenMPI's bound is INT_MAX, and INT_MAX + 1 overflows an int.
    const int sequence = static_cast<int>(int64_t{tag & ((1u << kSequenceBits) - 1)} % (int64_t{tag_bound_} + 1));
    if (context == 0) return {messages_, peer, sequence};
    std::lock_guard lock(contexts_mutex_);
    auto it = contexts_.find(context);
    PX_CHECK(it != contexts_.end(), "MPI transport: context {} was never opened", context);
    const int local = it->second.rank_of.at(static_cast<size_t>(peer));
    PX_CHECK(local >= 0, "MPI transport: rank {} is not in context {}", peer, context);
    return {it->second.comm, local, sequence};
  }

  // An MPI communicator over exactly `group` (world ranks, in order) of
  // `parent` (collective over the group's members only).
  MPI_Comm create_comm(MPI_Comm parent, std::span<const int> group, int tag) {
    std::vector<int> ranks(group.begin(), group.end());
    MPI_Group world_group, sub_group;
    MPI_Comm_group(parent, &world_group);
    MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &sub_group);
    MPI_Comm comm;
    const int mpi_tag = static_cast<int>(tag % (int64_t{tag_bound_} + 1));
    check_mpi(MPI_Comm_create_group(parent, sub_group, mpi_tag, &comm), "MPI_Comm_create_group");
    MPI_Group_free(&sub_group);
    MPI_Group_free(&world_group);
    return comm;
  }

  // The same, made once per group, for native collectives and shared windows.
  MPI_Comm group_comm(std::span<const int> group, int tag) {
    std::vector<int> key(group.begin(), group.end());
    auto it = groups_.find(key);
    if (it != groups_.end()) return it->second;
    MPI_Comm comm = create_comm(control_, group, tag);
    groups_.emplace(key, comm);
    return comm;
  }

  MPI_Comm messages_ = MPI_COMM_NULL;
  MPI_Comm control_ = MPI_COMM_NULL;  // for making group communicators
  MPI_Comm contexts_parent_ = MPI_COMM_NULL;  // for making the contexts' communicators
  int tag_bound_ = 32767;                     // MPI_TAG_UB (or MpiOptions::tag_bound)
  struct Context {
    MPI_Comm comm = MPI_COMM_NULL;
    std::vector<int> rank_of;  // world rank -> rank in comm (-1: not a member)
  };
  std::mutex contexts_mutex_;
  std::map<int, Context> contexts_;
  int rank_ = 0, size_ = 1;
  uint64_t host_ = 0;
  std::map<std::vector<int>, MPI_Comm> groups_;
  std::vector<std::shared_ptr<Window>> windows_;
  bool serialize_ = false;
  std::mutex call_mutex_;
};

struct Session {
  bool we_initialized = false;
  std::shared_ptr<MpiTransport> transport;
  std::unique_ptr<Communicator> world;
  int pmi_fd = -1;  // MpiOptions::pmi_fd
};
Session& session() {
  static Session instance;
  return instance;
}

}  // namespace

namespace mpi {

bool available() { return true; }

void init(int* argc, char*** argv, CommunicatorOptions options, MpiOptions mpi) {
  Session& s = session();
  if (s.world) return;
  int already = 0;
  MPI_Initialized(&already);
  // MULTIPLE: the CommEngine's progress thread and the caller's thread both
  // make MPI calls.
  int provided = 0;
  if (!already) {
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    s.we_initialized = true;
  } else {
    MPI_Query_thread(&provided);
  }
  s.transport = std::make_shared<MpiTransport>(provided < MPI_THREAD_MULTIPLE, mpi.tag_bound);
  s.pmi_fd = mpi.pmi_fd;
  s.world = std::make_unique<Communicator>(s.transport, options);
}

bool initialized() { return session().world != nullptr; }

Communicator& world() {
  if (!session().world) fail("MPI world requested before px::comm::mpi::init");
  return *session().world;
}

namespace {

// Leaves the process once no peer can still need a message from it. A
// rank past finalize()'s barrier may have sent its last barrier message
// into UCX's queue without it reaching the wire, and a peer whose pending
// message meets a closed connection is ended by MPICH with exit code 1
// (seen in CI, nothing printed). So a second barrier, driven here until
// it completes (every rank has then left the first and entered this one),
// and then a linger that keeps driving progress for a second: time for
// every peer to take this rank's last messages before its sockets close.
// An MPI_Ibarrier on the world, tested every `poll` until it completes or
// `deadline` passes: the first error's code, or MPI_SUCCESS.
int barrier_polled(std::chrono::milliseconds poll, std::chrono::steady_clock::time_point deadline) {
  MPI_Request request = MPI_REQUEST_NULL;
  int code = MPI_Ibarrier(MPI_COMM_WORLD, &request);
  for (int done = 0; code == MPI_SUCCESS && !done && std::chrono::steady_clock::now() < deadline;) {
    code = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (code == MPI_SUCCESS && !done) std::this_thread::sleep_for(poll);
  }
  return code;
}

// What MPI_Finalize says to hydra last, said here without the rest of
// MPI_Finalize: PMI-1's finalize over `pmi_fd` (MpiOptions::pmi_fd; none:
// nothing to say), then its acknowledgement (at most 5 s). A rank that exits without it is
// taken by hydra's proxy for a failed one: it kills the host's other ranks
// and, about once in 30 runs here, the job ended "BAD TERMINATION ... EXIT
// CODE: 1" after every rank had finished (nothing printed by any rank).
void tell_launcher_finalized(int fd) {
  if (fd < 0) return;
  static constexpr std::string_view kFinalize = "cmd=finalize\n";
  if (::write(fd, kFinalize.data(), kFinalize.size()) != static_cast<ssize_t>(kFinalize.size())) return;
  pollfd reply{.fd = fd, .events = POLLIN, .revents = 0};
  char ack[64];
  if (::poll(&reply, 1, 5000) > 0) (void)!::read(fd, ack, sizeof ack);
}

[[noreturn]] void leave_without_finalize(int pmi_fd) {
  barrier_polled(std::chrono::milliseconds(1), std::chrono::steady_clock::now() + std::chrono::seconds(10));
  const auto linger = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < linger) {
    int pending = 0;
    if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &pending, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  tell_launcher_finalized(pmi_fd);
  std::fflush(nullptr);
  std::_Exit(0);
}

}  // namespace

void wait_quietly_for_all() {
  check_mpi(barrier_polled(std::chrono::milliseconds(5), std::chrono::steady_clock::time_point::max()),
            "a quiet barrier (MPI_Ibarrier, MPI_Test)");
}

void finalize() {
  Session& s = session();
  if (!s.world) return;
  const bool spans_hosts = s.world->size() > 1 && std::ranges::any_of(s.world->hosts(), [](int h) { return h > 0; });
  s.world.reset();
  s.transport.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!s.we_initialized || finalized) return;
  // Every rank has finished its work once the barrier returns. From here a
  // peer leaving is no error worth ending the job for.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  // Polled, sleeping between polls: the ranks that finish first would
  // otherwise spin in MPI's barrier on the cores the lead still uses for
  // its prediction (its probe of the host's rates among them).
  barrier_polled(std::chrono::milliseconds(1), std::chrono::steady_clock::time_point::max());
  // MPICH 4.0 over UCX's TCP transport (ranks on separate hosts) hangs in
  // MPI_Finalize in about half the runs: some ranks wait in the launcher's
  // barrier while the others flush endpoints only those ranks' progress
  // would complete (openucx/ucx#8738). So those ranks leave without it
  // (hydra takes a rank's exit without MPI_Finalize as success; OpenMPI's
  // mpirun would not: docs/multi_host.md), once it is safe to.
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  if (spans_hosts && std::string_view(version, static_cast<size_t>(length)).starts_with("MPICH")) {
    leave_without_finalize(s.pmi_fd);
  }
  MPI_Finalize();
}

void abort(int code) {
  // The caller has just written why to stderr. MPICH's hydra proxy kills the
  // ranks on MPI_Abort without draining their output pipes, so under load the
  // line naming the failed rank could be lost (seen in CI): give the launcher
  // a moment to forward it first.
  std::fflush(nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace mpi
}  // namespace px::comm
