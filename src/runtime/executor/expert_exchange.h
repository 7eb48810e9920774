// Expert parallelism's routed exchange on one expert group (the ranks of
// the expert axis; parallel/program.h's Route): a mixture of experts' rows
// to the ranks of their experts, and back. Expert e lives on the rank whose
// core/block.h block of the E experts holds it.
//
// Every exchange first agrees: each rank allgathers a header (its place in
// the Program, the layer's expert count and capacity factor, the first row
// it routes to an expert that does not exist) and its per-expert counts,
// and every rank checks them all, so a disagreement is the same named
// error on every rank (naming the rank and the layer), never a hang. Then
// the rows move by one all-to-all-v sized by the counts.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "kernels/moe.h"

namespace px {

// What a rank tells its expert group before an exchange.
struct RouteHeader {
  int64_t site = 0;              // the Route instruction's index: every rank at the same one
  int64_t experts = 0;           // the layer's E
  double capacity_factor = 0;    // the router's (0: dropless)
  int64_t bad_row = -1;          // a row routed to an expert >= E (-1: none)
  int64_t bad_expert = -1;
  // The memory check of a dispatch (0: none): the rows the Program planned
  // for (a balanced routing's), what each row beyond them holds until the
  // layer's exchange back, and what this rank's machine has available. A
  // rank that would receive more than fits is refused on every rank,
  // naming it, its busiest expert and the rows, before anything allocates.
  int64_t planned_rows = 0;
  double bytes_per_row = 0;
  double available_bytes = 0;
};

// This rank's rows and everyone's counts, agreed.
class RoutePlan {
 public:
  // Collective over `group`. `choice` (rows) holds global expert ids
  // (negative: dropped by capacity); `where` names the layer in errors.
  RoutePlan(comm::Communicator& group, const RouteHeader& header, const int32_t* choice, int64_t rows,
            const std::string& where);

  // Rows rank `rank` (this one by default) receives by dispatch: the rows of its experts.
  int64_t arriving(int rank) const;
  int64_t arriving() const { return arriving(rank_); }
  // How many rows rank `from` routes to expert `expert`.
  int64_t count(int from, int64_t expert) const {
    return counts_[static_cast<size_t>(from * experts_ + expert)];
  }

  // x (rows, C) -> (arriving, C), and this rank's expert (among its own)
  // of each arriving row: by expert, then source rank, then row, so each
  // expert's rows are one block (the experts' GEMMs read them in place).
  Tensor dispatch(comm::Communicator& group, const Tensor& x, Tensor& local_expert) const;
  // yd (arriving, C) -> (rows, C): each row back where dispatch took it
  // from, dropped rows zero.
  Tensor undispatch(comm::Communicator& group, const Tensor& yd, const Shape& shape) const;

 private:
  int ranks_ = 1, rank_ = 0;
  int64_t experts_ = 0, rows_ = 0;
  std::vector<int64_t> counts_;  // ranks x experts
  kernels::ExpertRows mine_;     // this rank's rows by expert
  int64_t first_expert(int rank) const;
  int64_t end_expert(int rank) const;
  int64_t rows_between(int from, int64_t begin, int64_t end) const;
  // Bytes this rank sends each rank and receives from it, rows `row_bytes`
  // long: to the experts' ranks (dispatch) or back to the tokens' ranks.
  std::pair<std::vector<int64_t>, std::vector<int64_t>> bytes_each_way(int64_t row_bytes, bool to_experts) const;
  // The arriving rows between the exchange's layout (by source rank, then
  // expert) and the experts' (by expert, then source rank).
  void reorder(const Tensor& from, Tensor& to, int64_t row_bytes, bool to_expert_major) const;
};

}  // namespace px
