// Binomial-tree broadcast: ceil(log2 p) steps; in step k every rank that has
// the data (relative rank < 2^k) sends it to relative rank + 2^k. Segments of
// kSegmentBytes let a rank forward a segment while the next arrives. Ranks
// are renumbered relative to the root (v = (r - root) mod p).
#include <algorithm>
#include <vector>

#include "comm/algorithms.h"

namespace px::comm::detail {

void broadcast_tree(Communicator& comm, Buffer data, int root) {
  const int p = comm.size();
  if (p == 1 || data.count == 0) return;
  const uint32_t tag = comm.next_tag();
  const int v = (comm.rank() - root + p) % p;
  const size_t element = data.element_size();
  const int64_t segment = std::max<int64_t>(1, kSegmentBytes / element);
  const int64_t segments = (data.count + segment - 1) / segment;
  auto length = [&](int64_t i) { return std::min(segment, data.count - i * segment) * element; };
  // Parent: v with its highest set bit cleared; children: v + 2^k for 2^k > v.
  int high = 1;
  while (high <= v) high <<= 1;
  const int parent = v == 0 ? -1 : ((v - high / 2) + root) % p;
  std::vector<int> children;
  for (int k = high; v + k < p; k <<= 1) children.push_back((v + k + root) % p);
  std::vector<Request> from_parent, to_children;
  if (parent >= 0)
    for (int64_t i = 0; i < segments; ++i)
      from_parent.push_back(comm.irecv(parent, tag, data.at(i * segment), length(i)));
  for (int64_t i = 0; i < segments; ++i) {
    if (parent >= 0) comm.wait(from_parent[i], Step{"broadcast(tree)", static_cast<int>(i)});
    // Farthest child first: its subtree is the largest.
    for (auto c = children.rbegin(); c != children.rend(); ++c)
      to_children.push_back(comm.isend(*c, tag, data.at(i * segment), length(i)));
  }
  comm.wait_all(to_children, Step{"broadcast(tree)", static_cast<int>(segments)});
}

}  // namespace px::comm::detail
