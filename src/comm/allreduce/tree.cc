// Binary-tree allreduce: reduce up a binary tree rooted at rank 0 (parent of
// r is (r-1)/2, children 2r+1 and 2r+2), then broadcast down the same tree.
// Both phases run in kSegmentBytes segments, so a rank forwards segment i
// while segment i+1 is still on the way: time ~ (depth + segments) · segment
// time instead of depth · n. An inner rank receives 2n and sends n going up,
// receives n and sends 2n coming down. Each segment is reduced once per
// rank in the order (own, left child, right child), so results are identical.
#include <algorithm>
#include <vector>

#include "comm/algorithms.h"
#include "comm/reduction.h"

namespace px::comm::detail {

void allreduce_tree(Communicator& comm, Buffer data, Reduction op) {
  const int p = comm.size(), r = comm.rank();
  if (p == 1 || data.count == 0) return;
  const uint32_t tag = comm.next_tag();
  const size_t element = data.element_size();
  const int64_t segment = std::max<int64_t>(1, kSegmentBytes / element);
  const int64_t segments = (data.count + segment - 1) / segment;
  const int parent = r == 0 ? -1 : (r - 1) / 2;
  std::vector<int> children;
  for (int c : {2 * r + 1, 2 * r + 2})
    if (c < p) children.push_back(c);
  auto length = [&](int64_t i) { return std::min(segment, data.count - i * segment) * element; };

  // Up: children's partial sums arrive in scratch, one n-element slot each.
  char* slots = static_cast<char*>(comm.scratch(children.size() * data.bytes(), 1));
  std::vector<Request> from_children, to_parent;
  for (int64_t i = 0; i < segments; ++i)
    for (size_t c = 0; c < children.size(); ++c)
      from_children.push_back(comm.irecv(children[c], tag,
                                         slots + c * data.bytes() + i * segment * element,
                                         length(i)));
  const void* sources[3];
  for (int64_t i = 0; i < segments; ++i) {
    const Step step{"allreduce(tree) reduce", static_cast<int>(i)};
    char* mine = data.at(i * segment);
    sources[0] = mine;
    for (size_t c = 0; c < children.size(); ++c) {
      comm.wait(from_children[i * children.size() + c], step);
      sources[c + 1] = slots + c * data.bytes() + i * segment * element;
    }
    reduce_many(mine, sources, 1 + static_cast<int>(children.size()), length(i) / element,
                data.dtype, op);
    if (parent >= 0) to_parent.push_back(comm.isend(parent, tag, mine, length(i)));
  }
  comm.wait_all(to_parent, Step{"allreduce(tree) reduce", static_cast<int>(segments)});

  // Down: the root's result, forwarded segment by segment.
  std::vector<Request> from_parent, to_children;
  if (parent >= 0)
    for (int64_t i = 0; i < segments; ++i)
      from_parent.push_back(comm.irecv(parent, tag, data.at(i * segment), length(i)));
  for (int64_t i = 0; i < segments; ++i) {
    if (parent >= 0) comm.wait(from_parent[i], Step{"allreduce(tree) broadcast", static_cast<int>(i)});
    for (int c : children) to_children.push_back(comm.isend(c, tag, data.at(i * segment), length(i)));
  }
  comm.wait_all(to_children, Step{"allreduce(tree) broadcast", static_cast<int>(segments)});
}

}  // namespace px::comm::detail
