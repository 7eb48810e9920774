// How the ranks of a checkpoint agree over the transport, assuming no
// filesystem they share: which ranks see the same checkpoint directory (a
// probe, once per writer), and whether every rank's shard is written (each
// rank reports its shard's bytes and checksum to rank 0, whose verdict
// reaches every rank). Every filesystem's lead rank then writes the commit
// record (state.json) of the ranks on it and swaps the directory in
// (checkpoint.h). On one shared filesystem there is one lead, rank 0.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace px {

// Which group ranks see the same checkpoint directory.
struct Filesystems {
  std::vector<int> lead;  // by group rank: the lowest rank seeing the same directory

  bool shared() const;  // every rank sees rank 0's
  // Group ranks on `rank`'s filesystem, ascending.
  std::vector<int> members(int rank) const;
};

// Collective over `group` (nullptr: this process alone, one filesystem):
// every rank drops a file named after itself into `<dir>.tmp.probe-<nonce>`
// (the nonce rank 0's, so no earlier run's leftovers count) and lists the
// directory; ranks that list each other share a filesystem. The probe is
// removed before returning. px::Error (on every rank) when a rank cannot
// write next to `dir`.
Filesystems probe_filesystems(comm::Communicator* group, const std::string& dir);

// One rank's part of a checkpoint as written: its shard file's size and
// checksum (0, 0 with no shard), or why it failed.
struct ShardReport {
  std::string error;  // "" when written
  uint64_t bytes = 0;
  uint64_t checksum = 0;
  bool operator==(const ShardReport&) const = default;
};

// Rank 0's verdict on a save, known to every rank.
struct CommitVerdict {
  bool commit = false;
  std::string error;                 // why not: the first failing rank's, named
  std::vector<ShardReport> shards;   // every rank's bytes and checksum, by group rank (no errors)
};

// Collective over `comm` (a communicator the writer keeps for itself, so it
// may run beside training): every rank's report reaches rank 0, which
// commits only if every rank wrote its shard; the verdict reaches every
// rank. Polls `stop` while waiting: once set, px::Error "abandoned" (but a
// rank's own report still goes out: a save every rank finished writing
// commits even if a job stops right after; rank 0's verdict stands whether
// or not every rank takes it).
CommitVerdict agree_on_commit(comm::Communicator& comm, const ShardReport& mine, const std::atomic<bool>& stop);

// FNV-1a (64 bits) of a file's bytes; px::Error when it cannot be read.
uint64_t file_checksum(const std::string& path);

}  // namespace px
