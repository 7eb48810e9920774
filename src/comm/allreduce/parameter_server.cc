// Parameter-server allreduce with k servers (k = 1: the classic single
// server; k > 1: K-sharded). The buffer is cut into k shards (block()); shard
// j lives on server rank j·p/k. Every rank sends shard j to its server, the
// server reduces the p contributions in rank order and sends the result back.
// A server receives and sends (p-1) · n/k elements per shard it holds, so the
// busiest rank moves max(n, p·n/k) — the single server is the bottleneck
// that sharding removes. Two steps: push, pull.
#include <algorithm>
#include <vector>

#include "comm/algorithms.h"
#include "comm/reduction.h"

namespace px::comm::detail {

void allreduce_parameter_server(Communicator& comm, Buffer data, Reduction op, int servers) {
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const int k = std::clamp(servers, 1, p);
  const uint32_t tag = comm.next_tag();
  const size_t element = data.element_size();
  auto server_of = [&](int shard) { return static_cast<int>(int64_t{shard} * p / k); };
  const int64_t shard_max = block(data.count, k, 0).count;
  // Receive space for the shards this rank serves: p slots each.
  int served = 0;
  for (int j = 0; j < k; ++j) served += server_of(j) == r;
  char* slots = static_cast<char*>(comm.scratch(served * p * shard_max * element, 2));

  // Step 0 (push): contributions to the servers.
  std::vector<Request> pushes, gathers;
  for (int j = 0, slot = 0; j < k; ++j) {
    const Block shard = block(data.count, k, j);
    if (shard.count == 0) continue;
    if (server_of(j) != r) {
      pushes.push_back(comm.isend(server_of(j), tag, data.at(shard.begin), shard.count * element));
      continue;
    }
    char* base = slots + slot++ * p * shard_max * element;
    for (int q = 0; q < p; ++q)
      if (q != r)
        gathers.push_back(comm.irecv(q, tag, base + q * shard_max * element, shard.count * element));
  }
  const Step push{"allreduce(parameter_server) push", 0};
  comm.wait_all(gathers, push);
  std::vector<const void*> sources(p);
  std::vector<Request> results;
  for (int j = 0, slot = 0; j < k; ++j) {
    const Block shard = block(data.count, k, j);
    if (shard.count == 0 || server_of(j) != r) continue;
    char* base = slots + slot++ * p * shard_max * element;
    for (int q = 0; q < p; ++q)
      sources[q] = q == r ? data.at(shard.begin) : base + q * shard_max * element;
    reduce_many(data.at(shard.begin), sources.data(), p, shard.count, data.dtype, op);
    for (int q = 0; q < p; ++q)
      if (q != r) results.push_back(comm.isend(q, tag, data.at(shard.begin), shard.count * element));
  }
  comm.wait_all(pushes, push);  // the pulled result lands where the pushes read

  // Step 1 (pull): results from the servers.
  for (int j = 0; j < k; ++j) {
    const Block shard = block(data.count, k, j);
    if (shard.count > 0 && server_of(j) != r)
      results.push_back(comm.irecv(server_of(j), tag, data.at(shard.begin), shard.count * element));
  }
  comm.wait_all(results, Step{"allreduce(parameter_server) pull", 1});
}

}  // namespace px::comm::detail
