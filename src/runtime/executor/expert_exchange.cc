#include "runtime/executor/expert_exchange.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "comm/collectives.h"
#include "core/block.h"
#include "core/error.h"

namespace px {
namespace {

// The header as floats, then the counts (exact below 2^24 rows).
constexpr size_t kHeaderFloats = 8;

std::vector<float> pack(const RouteHeader& h, const std::vector<int64_t>& counts) {
  std::vector<float> out{static_cast<float>(h.site),         static_cast<float>(h.experts),
                         static_cast<float>(h.capacity_factor), static_cast<float>(h.bad_row),
                         static_cast<float>(h.bad_expert),   static_cast<float>(h.planned_rows),
                         static_cast<float>(h.bytes_per_row), static_cast<float>(h.available_bytes)};
  for (int64_t c : counts) out.push_back(static_cast<float>(c));
  return out;
}

RouteHeader unpack(const float* f) {
  return {.site = static_cast<int64_t>(f[0]),
          .experts = static_cast<int64_t>(f[1]),
          .capacity_factor = f[2],
          .bad_row = static_cast<int64_t>(f[3]),
          .bad_expert = static_cast<int64_t>(f[4]),
          .planned_rows = static_cast<int64_t>(f[5]),
          .bytes_per_row = f[6],
          .available_bytes = f[7]};
}

}  // namespace

RoutePlan::RoutePlan(comm::Communicator& group, const RouteHeader& header, const int32_t* choice, int64_t rows,
                     const std::string& where)
    : ranks_(group.size()), rank_(group.rank()), experts_(header.experts), rows_(rows) {
  RouteHeader mine = header;
  std::vector<int64_t> counts(static_cast<size_t>(experts_), 0);
  for (int64_t r = 0; r < rows && mine.bad_row < 0; ++r)
    if (choice[r] >= experts_) {
      mine.bad_row = r;
      mine.bad_expert = choice[r];
    }
  if (mine.bad_row < 0)
    for (int64_t r = 0; r < rows; ++r)
      if (choice[r] >= 0) ++counts[static_cast<size_t>(choice[r])];
  const std::vector<float> packed = pack(mine, counts);
  std::vector<float> all(packed.size() * static_cast<size_t>(ranks_));
  comm::allgather(group, packed.data(), comm::Buffer(std::span<float>(all)));
  const size_t stride = packed.size();
  std::vector<RouteHeader> headers;
  for (int s = 0; s < ranks_; ++s) headers.push_back(unpack(all.data() + static_cast<size_t>(s) * stride));
  // Every rank checks every header alike, so all fail together.
  for (int s = 0; s < ranks_; ++s) {
    const RouteHeader& h = headers[static_cast<size_t>(s)];
    if (h.bad_row >= 0)
      fail("expert parallelism: at {} expert rank {} routes row {} to expert {}, but the layer has {} experts "
           "(0 to {})",
           where, s, h.bad_row, h.bad_expert, experts_, experts_ - 1);
    if (h.site != mine.site || h.experts != mine.experts)
      fail("expert parallelism: at {} expert rank {} is at exchange #{} of {} experts, rank {} at #{} of {}: the "
           "expert ranks run different programs",
           where, s, h.site, h.experts, rank_, mine.site, mine.experts);
    if (h.capacity_factor != static_cast<float>(mine.capacity_factor))
      fail("expert parallelism: at {} expert rank {} routes with capacity factor {}, rank {} with {}: every rank "
           "must drop by the same capacity, or the exchange's counts cannot agree",
           where, s, h.capacity_factor, rank_, static_cast<float>(mine.capacity_factor));
  }
  counts_.resize(static_cast<size_t>(ranks_ * experts_));
  for (int s = 0; s < ranks_; ++s)
    for (int64_t e = 0; e < experts_; ++e)
      counts_[static_cast<size_t>(s * experts_ + e)] =
          static_cast<int64_t>(all[static_cast<size_t>(s) * stride + kHeaderFloats + static_cast<size_t>(e)]);
  mine_ = kernels::group_rows_by_expert(rows, experts_, choice);
  // Dropless routing's hot rank: what it would receive beyond the plan, against its machine.
  for (int s = 0; s < ranks_; ++s) {
    const RouteHeader& h = headers[static_cast<size_t>(s)];
    const int64_t arriving_at_s = arriving(s);
    const double beyond = static_cast<double>(std::max<int64_t>(arriving_at_s - h.planned_rows, 0)) * h.bytes_per_row;
    if (h.available_bytes <= 0 || beyond <= h.available_bytes) continue;
    int64_t busiest = first_expert(s), most = -1;
    for (int64_t e = first_expert(s); e < end_expert(s); ++e) {
      int64_t n = 0;
      for (int q = 0; q < ranks_; ++q) n += count(q, e);
      if (n > most) std::tie(busiest, most) = std::pair{e, n};
    }
    fail("expert parallelism: at {} expert rank {} would receive {} rows, {} beyond the {} its Program planned for "
         "(expert {} alone gets {}): {:.2f} GiB more than the {:.2f} GiB its machine has available. Refused before "
         "allocating: balance the load (--moe-aux-loss, --moe-balance bias), bound it (--capacity-factor) or "
         "spread the experts wider (--ep)",
         where, s, arriving_at_s, arriving_at_s - h.planned_rows, h.planned_rows, busiest, most,
         beyond / double(1 << 30), h.available_bytes / double(1 << 30));
  }
}

int64_t RoutePlan::first_expert(int rank) const { return block(experts_, ranks_, rank).begin; }
int64_t RoutePlan::end_expert(int rank) const {
  const Block b = block(experts_, ranks_, rank);
  return b.begin + b.count;
}

int64_t RoutePlan::rows_between(int from, int64_t begin, int64_t end) const {
  int64_t n = 0;
  for (int64_t e = begin; e < end; ++e) n += count(from, e);
  return n;
}

int64_t RoutePlan::arriving(int rank) const {
  int64_t n = 0;
  for (int s = 0; s < ranks_; ++s) n += rows_between(s, first_expert(rank), end_expert(rank));
  return n;
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> RoutePlan::bytes_each_way(int64_t row_bytes,
                                                                                bool to_experts) const {
  std::vector<int64_t> mine_to(static_cast<size_t>(ranks_)), theirs_to_me(static_cast<size_t>(ranks_));
  for (int d = 0; d < ranks_; ++d) {
    mine_to[static_cast<size_t>(d)] = rows_between(rank_, first_expert(d), end_expert(d)) * row_bytes;
    theirs_to_me[static_cast<size_t>(d)] = rows_between(d, first_expert(rank_), end_expert(rank_)) * row_bytes;
  }
  // Dispatch sends this rank's rows for d's experts; the trip back returns d's rows of this rank's experts.
  if (to_experts) return {mine_to, theirs_to_me};
  return {theirs_to_me, mine_to};
}

Tensor RoutePlan::dispatch(comm::Communicator& group, const Tensor& x, Tensor& local_expert) const {
  const int64_t width = x.numel() / std::max<int64_t>(rows_, 1);
  const int64_t row_bytes = width * static_cast<int64_t>(dtype_size(x.dtype()));
  // This rank's routed rows grouped by expert, so by destination rank.
  const auto routed = static_cast<int64_t>(mine_.rows.size());
  Tensor sending = Tensor::empty({routed, width}, x.dtype());
  for (int64_t i = 0; i < routed; ++i)
    std::memcpy(static_cast<char*>(sending.raw()) + i * row_bytes,
                static_cast<const char*>(x.raw()) + mine_.rows[static_cast<size_t>(i)] * row_bytes,
                static_cast<size_t>(row_bytes));
  const auto [send, receive] = bytes_each_way(row_bytes, true);
  const int64_t arrive = arriving();
  Tensor by_source = Tensor::empty({arrive, width}, x.dtype());
  comm::all_to_all_v(group, sending.raw(), send, by_source.raw(), receive);
  Tensor out = Tensor::empty({arrive, width}, x.dtype());
  reorder(by_source, out, row_bytes, true);
  local_expert = Tensor::empty({arrive}, DType::i32);
  int32_t* ids = local_expert.data<int32_t>();
  int64_t at = 0;
  const int64_t first = first_expert(rank_);
  for (int64_t e = first; e < end_expert(rank_); ++e)
    for (int s = 0; s < ranks_; ++s)
      for (int64_t n = count(s, e); n > 0; --n) ids[at++] = static_cast<int32_t>(e - first);
  return out;
}

void RoutePlan::reorder(const Tensor& from, Tensor& to, int64_t row_bytes, bool to_expert_major) const {
  // Where each (source, expert) run starts in either layout.
  const int64_t first = first_expert(rank_), end = end_expert(rank_);
  std::vector<int64_t> source_at(static_cast<size_t>(ranks_) + 1, 0);
  for (int s = 0; s < ranks_; ++s) source_at[static_cast<size_t>(s) + 1] = source_at[static_cast<size_t>(s)] + rows_between(s, first, end);
  int64_t expert_at = 0;
  for (int64_t e = first; e < end; ++e)
    for (int s = 0; s < ranks_; ++s) {
      const int64_t n = count(s, e);
      const int64_t at_source = source_at[static_cast<size_t>(s)] + rows_between(s, first, e);
      const int64_t src = to_expert_major ? at_source : expert_at, dst = to_expert_major ? expert_at : at_source;
      if (n > 0)
        std::memcpy(static_cast<char*>(to.raw()) + dst * row_bytes,
                    static_cast<const char*>(from.raw()) + src * row_bytes, static_cast<size_t>(n * row_bytes));
      expert_at += n;
    }
}

Tensor RoutePlan::undispatch(comm::Communicator& group, const Tensor& yd, const Shape& shape) const {
  const int64_t width = shape[-1];
  const int64_t row_bytes = width * static_cast<int64_t>(dtype_size(yd.dtype()));
  PX_CHECK(yd.numel() == arriving() * width, "undispatch: {} elements arrive, {} rows of {} expected", yd.numel(),
           arriving(), width);
  const auto [send, receive] = bytes_each_way(row_bytes, false);
  const auto routed = static_cast<int64_t>(mine_.rows.size());
  Tensor by_source = Tensor::empty({arriving(), width}, yd.dtype());
  reorder(yd, by_source, row_bytes, false);
  Tensor back = Tensor::empty({routed, width}, yd.dtype());
  comm::all_to_all_v(group, by_source.raw(), send, back.raw(), receive);
  Tensor out = Tensor::zeros(shape, yd.dtype());
  for (int64_t i = 0; i < routed; ++i)
    std::memcpy(static_cast<char*>(out.raw()) + mine_.rows[static_cast<size_t>(i)] * row_bytes,
                static_cast<const char*>(back.raw()) + i * row_bytes, static_cast<size_t>(row_bytes));
  return out;
}

}  // namespace px
