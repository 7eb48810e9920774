// comm::wire_bytes, the one formula of what a rank sends: against the
// bytes the in-process transport counted for the ring collectives on
// uneven rank counts, the hierarchical allreduce's split (node leaders
// send the ring between nodes, the others stay inside their node) and a
// codec's payload.
#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "comm/backends.h"
#include "comm/collectives.h"
#include "comm/compression/recipe.h"
#include "comm/wire_bytes.h"

namespace px::comm {
namespace {

TEST(WireBytes, RingCollectivesSendWhatTheTransportCounts) {
  for (int ranks : {2, 3, 4}) {
    constexpr int64_t n = 3000;  // floats, divisible by every rank count here
    std::mutex mutex;
    std::vector<uint64_t> allreduce(static_cast<size_t>(ranks)), scatter(static_cast<size_t>(ranks)),
        gather(static_cast<size_t>(ranks));
    run_inproc(ranks, [&](Communicator& comm) {
      const CollectiveOptions ring{.algorithm = Algorithm::ring};
      std::vector<float> data(n, 1.0f), block(n / ranks);
      uint64_t before = comm.bytes_sent();
      comm::allreduce(comm, std::span<float>(data), Reduction::sum, ring);
      const uint64_t reduced = comm.bytes_sent() - before;
      before = comm.bytes_sent();
      comm::reduce_scatter(comm, data.data(), Buffer(std::span<float>(block)), n, Reduction::sum, ring);
      const uint64_t scattered = comm.bytes_sent() - before;
      before = comm.bytes_sent();
      comm::allgather(comm, block.data(), Buffer(std::span<float>(data)), ring);
      const uint64_t gathered = comm.bytes_sent() - before;
      std::lock_guard lock(mutex);
      allreduce[static_cast<size_t>(comm.rank())] = reduced;
      scatter[static_cast<size_t>(comm.rank())] = scattered;
      gather[static_cast<size_t>(comm.rank())] = gathered;
    });
    for (int r = 0; r < ranks; ++r) {
      auto wire = [&](Collective kind) {
        return wire_bytes({.collective = kind, .options = {.algorithm = Algorithm::ring}, .bytes = 4 * n,
                           .ranks = ranks, .rank = r});
      };
      EXPECT_EQ(wire(Collective::allreduce).total(), static_cast<int64_t>(allreduce[static_cast<size_t>(r)]))
          << ranks << " ranks, rank " << r;
      EXPECT_EQ(wire(Collective::reduce_scatter).total(), static_cast<int64_t>(scatter[static_cast<size_t>(r)]));
      EXPECT_EQ(wire(Collective::allgather).total(), static_cast<int64_t>(gather[static_cast<size_t>(r)]));
      EXPECT_EQ(wire(Collective::allreduce).inter_node, 0) << "no node size: every byte within a node";
    }
  }
}

TEST(WireBytes, HierarchicalLeadersAloneCrossNodes) {
  const int64_t n = 1 << 20;
  auto on = [&](int rank) {
    return wire_bytes({.options = {.algorithm = Algorithm::hierarchical, .ranks_per_node = 2},
                       .bytes = n, .ranks = 4, .rank = rank});
  };
  // Two nodes: the leaders ring-allreduce between them, 2(2-1)/2 n each.
  EXPECT_EQ(on(0).inter_node, n);
  EXPECT_EQ(on(2).inter_node, n);
  EXPECT_EQ(on(1).inter_node, 0);
  EXPECT_EQ(on(3).inter_node, 0);
  // Inside a node the ranks share a segment: nothing on a link.
  EXPECT_EQ(on(1).intra_node, 0);
  EXPECT_EQ(on(0).intra_node, 0);
  // Without one, a tree over the transport inside the node.
  const WireBytes tree = wire_bytes({.options = {.algorithm = Algorithm::hierarchical, .ranks_per_node = 2},
                                     .bytes = n, .ranks = 4, .rank = 1, .node_shared_memory = false});
  EXPECT_GT(tree.intra_node, 0);
  EXPECT_EQ(tree.inter_node, 0);
  // A ring over the same two nodes: a rank sends everything to its
  // successor, so ranks 1 and 3 (successors 2 and 0) cross with every
  // byte, 0 and 2 none.
  auto ring = [&](int rank) {
    return wire_bytes({.options = {.algorithm = Algorithm::ring, .ranks_per_node = 2},
                       .bytes = n, .ranks = 4, .rank = rank});
  };
  EXPECT_EQ(ring(1), (WireBytes{.inter_node = 2 * 3 * n / 4}));
  EXPECT_EQ(ring(3), (WireBytes{.inter_node = 2 * 3 * n / 4}));
  EXPECT_EQ(ring(0), (WireBytes{.intra_node = 2 * 3 * n / 4}));
  // Host 0's bytes out: the ring's 1.5 n against hierarchical's n.
  EXPECT_EQ(on(0).inter_node + on(1).inter_node, n);
  EXPECT_EQ(ring(0).inter_node + ring(1).inter_node, 3 * n / 2);
}

// Where the run's ranks sit (AlgorithmMenu::hosts) decides, not blocks:
// hosts interleaved (0 1 0 1) put every ring successor on the other host,
// and hierarchical's leaders are each host's first rank.
TEST(WireBytes, TheRunsHostsDecideWhichBytesCross) {
  const int64_t n = 1 << 20;
  const std::vector<int> interleaved = {0, 1, 0, 1};
  for (int rank = 0; rank < 4; ++rank) {
    const WireBytes ring = wire_bytes({.options = {.algorithm = Algorithm::ring}, .bytes = n, .ranks = 4,
                                       .rank = rank, .hosts = interleaved});
    EXPECT_EQ(ring, (WireBytes{.inter_node = 3 * n / 2})) << "rank " << rank;
    const WireBytes hier = wire_bytes({.options = {.algorithm = Algorithm::hierarchical}, .bytes = n, .ranks = 4,
                                       .rank = rank, .hosts = interleaved});
    EXPECT_EQ(hier.inter_node, rank < 2 ? n : 0) << "rank " << rank << ": leaders are ranks 0 and 1";
  }
  // One host: nothing crosses, whatever the algorithm.
  for (Algorithm a : {Algorithm::ring, Algorithm::halving_doubling, Algorithm::tree, Algorithm::hierarchical})
    EXPECT_EQ(wire_bytes({.options = {.algorithm = a}, .bytes = n, .ranks = 4, .rank = 1, .hosts = {0, 0, 0, 0}})
                  .inter_node,
              0);
}

TEST(WireBytes, TheSharedMemoryAlgorithmSendsNothing) {
  EXPECT_EQ(wire_bytes({.options = {.algorithm = Algorithm::shared_memory}, .bytes = 4096, .ranks = 4}).total(), 0);
}

TEST(WireBytes, CompressedGradientsSendTheirPayload) {
  const int64_t floats = 10000;
  const compression::Spec topk = compression::Spec::parse("topk:0.01");
  const WireBytes sparse = wire_bytes({.bytes = 4 * floats, .ranks = 4, .codec = topk});
  // Every rank's (index, value) payload allgathered: 3 peers' worth sent.
  EXPECT_EQ(sparse.total(), std::llround(3 * compression::gathered_payload_bytes(topk, floats)));
  const WireBytes half = wire_bytes({.bytes = 4 * floats, .ranks = 4, .codec = compression::Spec::parse("bf16")});
  EXPECT_EQ(half.total(), wire_bytes({.bytes = 2 * floats, .ranks = 4}).total());
  EXPECT_LT(sparse.total(), half.total());
}

}  // namespace
}  // namespace px::comm
