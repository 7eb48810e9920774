#include "runtime/executor/trace.h"

namespace px {

void write_chrome_trace(const std::string& path, comm::Communicator* group, const std::vector<TraceRecord>& mine) {
  const int rank = group ? group->rank() : 0, size = group ? group->size() : 1;
  std::string text = chrome_trace_events(rank, mine);
  if (size == 1) return write_chrome_trace_file(path, {text});
  // Rank r > 0 sends its events' length, then the text, to rank 0.
  const uint32_t tag = group->next_tag();
  const comm::Step step{"trace gather", 0};
  if (rank != 0) {
    int64_t length = static_cast<int64_t>(text.size());
    comm::Request r = group->isend(0, tag, &length, sizeof length);
    group->wait(r, step);
    r = group->isend(0, tag, text.data(), text.size());
    group->wait(r, step);
    return;
  }
  std::vector<std::string> all{std::move(text)};
  for (int peer = 1; peer < size; ++peer) {
    int64_t length = 0;
    comm::Request r = group->irecv(peer, tag, &length, sizeof length);
    group->wait(r, step);
    std::string theirs(static_cast<size_t>(length), '\0');
    r = group->irecv(peer, tag, theirs.data(), theirs.size());
    group->wait(r, step);
    all.push_back(std::move(theirs));
  }
  write_chrome_trace_file(path, all);
}

}  // namespace px
