#include "runtime/checkpoint/commit.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "comm/collectives.h"
#include "core/atomic_file.h"
#include "core/error.h"

namespace px {
namespace fs = std::filesystem;
namespace {

// Every rank learns whether any rank failed; the failing rank throws its
// own message, the others one naming it.
void agree_probe(comm::Communicator& group, const std::string& error, const std::string& dir) {
  float failed = error.empty() ? 0.0f : static_cast<float>(group.rank() + 1);
  comm::allreduce(group, std::span<float>(&failed, 1), comm::Reduction::max);
  if (!error.empty())
    fail("checkpoint '{}' not saved: cannot write beside it (learning which ranks share its filesystem): {}", dir,
         error);
  if (failed > 0)
    fail("checkpoint '{}' not saved: rank {} cannot write beside it (its own error says why)", dir,
         static_cast<int>(failed) - 1);
}

// The wire form of a report: bytes, checksum, a failed flag, the error's text.
constexpr size_t kReportBytes = 512;
constexpr size_t kTextAt = 24;

void encode(const ShardReport& report, std::byte* out) {
  std::memset(out, 0, kReportBytes);
  std::memcpy(out, &report.bytes, 8);
  std::memcpy(out + 8, &report.checksum, 8);
  out[16] = std::byte{report.error.empty() ? uint8_t{0} : uint8_t{1}};
  std::memcpy(out + kTextAt, report.error.data(), std::min(report.error.size(), kReportBytes - kTextAt - 1));
}

ShardReport decode(const std::byte* in) {
  ShardReport report;
  std::memcpy(&report.bytes, in, 8);
  std::memcpy(&report.checksum, in + 8, 8);
  if (in[16] != std::byte{0}) {
    report.error = std::string(reinterpret_cast<const char*>(in + kTextAt));
    if (report.error.empty()) report.error = "(no message)";
  }
  return report;
}

// Waits for one request, giving up when `stop` is set.
void await(comm::Communicator& comm, comm::Request& request, int peer, const std::atomic<bool>& stop,
           std::string_view what) {
  if (request.done) return;
  comm::Communicator::Spinner spinner(comm);
  while (!comm.transport().test(request)) {
    if (stop) fail("abandoned: the job stopped before {}", what);
    spinner.pause(peer, {.collective = "checkpoint commit"}, what);
  }
}

}  // namespace

bool Filesystems::shared() const {
  return std::all_of(lead.begin(), lead.end(), [](int l) { return l == 0; });
}

std::vector<int> Filesystems::members(int rank) const {
  std::vector<int> out;
  for (size_t r = 0; r < lead.size(); ++r)
    if (lead[r] == lead[static_cast<size_t>(rank)]) out.push_back(static_cast<int>(r));
  return out;
}

Filesystems probe_filesystems(comm::Communicator* group, const std::string& dir) {
  if (group == nullptr || group->size() == 1) return {.lead = {0}};
  const int rank = group->rank(), world = group->size();
  int64_t nonce = 0;
  if (rank == 0) nonce = static_cast<int64_t>((uint64_t{std::random_device{}()} << 32) ^ std::random_device{}());
  comm::broadcast(*group, comm::Buffer(&nonce, 1, DType::i64), 0);
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  const std::string probe = fmt::format("{}.tmp.probe-{:016x}", base, static_cast<uint64_t>(nonce));
  std::string error;
  try {
    fs::create_directories(probe);
    write_file_atomically(fmt::format("{}/rank{}", probe, rank), "");
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_probe(*group, error, dir);  // every file is in place
  int lead = rank;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(probe, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 5 || name.compare(0, 4, "rank") != 0 ||
        !std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    lead = std::min(lead, std::stoi(name.substr(4)));
  }
  // Ranks up to 2^24 are exact in floats; the sum is also the barrier
  // after which every lead removes its filesystem's probe.
  std::vector<float> leads(static_cast<size_t>(world), 0.0f);
  leads[static_cast<size_t>(rank)] = static_cast<float>(lead);
  comm::allreduce(*group, std::span<float>(leads), comm::Reduction::sum);
  if (lead == rank) fs::remove_all(probe, ec);
  Filesystems out;
  for (float l : leads) out.lead.push_back(static_cast<int>(l));
  return out;
}

CommitVerdict agree_on_commit(comm::Communicator& comm, const ShardReport& mine, const std::atomic<bool>& stop) {
  const int rank = comm.rank(), world = comm.size();
  const uint32_t report_tag = comm.next_tag(), verdict_tag = comm.next_tag();
  // The verdict: a header (a failed flag and the first failure), then
  // every rank's bytes and checksum.
  const size_t verdict_bytes = kReportBytes + 16 * static_cast<size_t>(world);
  std::vector<std::byte> reports(kReportBytes * static_cast<size_t>(world));
  std::vector<std::byte> verdict(verdict_bytes);
  std::vector<comm::Request> requests;
  try {
    if (rank == 0) {
      encode(mine, reports.data());
      for (int r = 1; r < world; ++r)
        requests.push_back(comm.irecv(r, report_tag, reports.data() + kReportBytes * static_cast<size_t>(r),
                                      kReportBytes));
      for (int r = 1; r < world; ++r)
        await(comm, requests[static_cast<size_t>(r - 1)], r, stop,
              fmt::format("rank {} reported its shard file", r));
      requests.clear();
      ShardReport header;
      for (int r = 0; r < world && header.error.empty(); ++r) {
        const ShardReport report = decode(reports.data() + kReportBytes * static_cast<size_t>(r));
        if (!report.error.empty()) header.error = fmt::format("rank {} failed writing its shard file: {}", r, report.error);
      }
      encode(header, verdict.data());
      for (int r = 0; r < world; ++r)
        std::memcpy(verdict.data() + kReportBytes + 16 * static_cast<size_t>(r),
                    reports.data() + kReportBytes * static_cast<size_t>(r), 16);
      for (int r = 1; r < world; ++r) requests.push_back(comm.isend(r, verdict_tag, verdict.data(), verdict_bytes));
      // The verdict is final once made: a rank that stopped listening
      // (its job ended) changes nothing here.
      try {
        for (int r = 1; r < world; ++r)
          await(comm, requests[static_cast<size_t>(r - 1)], r, stop, fmt::format("rank {} took the verdict", r));
      } catch (const std::exception&) {
        for (comm::Request& request : requests)
          if (!request.done) comm.transport().cancel(request);
      }
    } else {
      encode(mine, reports.data());
      requests.push_back(comm.isend(0, report_tag, reports.data(), kReportBytes));
      requests.push_back(comm.irecv(0, verdict_tag, verdict.data(), verdict_bytes));
      // The report goes out even once this rank's job has stopped: its
      // shard is whole, and rank 0 may still commit what every rank wrote.
      static const std::atomic<bool> never{false};
      await(comm, requests[0], 0, never, "rank 0 took this rank's report");
      await(comm, requests[1], 0, stop, "rank 0 sent its verdict");
    }
  } catch (...) {
    for (comm::Request& r : requests)
      if (!r.done) comm.transport().cancel(r);
    throw;
  }
  CommitVerdict out;
  const ShardReport header = decode(verdict.data());
  out.commit = header.error.empty();
  out.error = header.error;
  for (int r = 0; r < world; ++r) {
    ShardReport& report = out.shards.emplace_back();
    std::memcpy(&report.bytes, verdict.data() + kReportBytes + 16 * static_cast<size_t>(r), 8);
    std::memcpy(&report.checksum, verdict.data() + kReportBytes + 16 * static_cast<size_t>(r) + 8, 8);
  }
  return out;
}

uint64_t file_checksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read '{}' for its checksum", path);
  uint64_t hash = 0xcbf29ce484222325ull;
  std::vector<char> chunk(1 << 20);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const std::streamsize got = in.gcount();
    for (std::streamsize i = 0; i < got; ++i) {
      hash ^= static_cast<uint8_t>(chunk[static_cast<size_t>(i)]);
      hash *= 0x100000001b3ull;
    }
  }
  if (in.bad()) fail("cannot read '{}' for its checksum", path);
  return hash;
}

}  // namespace px
