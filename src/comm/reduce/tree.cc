// Binomial-tree reduce, the mirror of broadcast/tree.cc: partial results flow
// from the leaves to the root in ceil(log2 p) levels; each rank combines its
// own data with its children's (in a fixed order) and sends one n-element
// result to its parent, segment by segment so levels overlap.
#include <algorithm>
#include <vector>

#include "comm/algorithms.h"
#include "comm/reduction.h"

namespace px::comm::detail {

void reduce_tree(Communicator& comm, Buffer data, Reduction op, int root) {
  const int p = comm.size();
  if (p == 1 || data.count == 0) return;
  const uint32_t tag = comm.next_tag();
  const int v = (comm.rank() - root + p) % p;
  const size_t element = data.element_size();
  const int64_t segment = std::max<int64_t>(1, kSegmentBytes / element);
  const int64_t segments = (data.count + segment - 1) / segment;
  auto length = [&](int64_t i) { return std::min(segment, data.count - i * segment) * element; };
  int high = 1;
  while (high <= v) high <<= 1;
  const int parent = v == 0 ? -1 : ((v - high / 2) + root) % p;
  std::vector<int> children;
  for (int k = high; v + k < p; k <<= 1) children.push_back((v + k + root) % p);
  const size_t c_count = children.size();
  char* slots = static_cast<char*>(comm.scratch(c_count * data.bytes(), 1));
  std::vector<Request> from_children, to_parent;
  for (int64_t i = 0; i < segments; ++i)
    for (size_t c = 0; c < c_count; ++c)
      from_children.push_back(comm.irecv(children[c], tag,
                                         slots + c * data.bytes() + i * segment * element,
                                         length(i)));
  std::vector<const void*> sources(1 + c_count);
  for (int64_t i = 0; i < segments; ++i) {
    const Step step{"reduce(tree)", static_cast<int>(i)};
    sources[0] = data.at(i * segment);
    for (size_t c = 0; c < c_count; ++c) {
      comm.wait(from_children[i * c_count + c], step);
      sources[c + 1] = slots + c * data.bytes() + i * segment * element;
    }
    reduce_many(data.at(i * segment), sources.data(), static_cast<int>(sources.size()),
                length(i) / element, data.dtype, op);
    if (parent >= 0) to_parent.push_back(comm.isend(parent, tag, data.at(i * segment), length(i)));
  }
  comm.wait_all(to_parent, Step{"reduce(tree)", static_cast<int>(segments)});
}

}  // namespace px::comm::detail
