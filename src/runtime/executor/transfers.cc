#include "runtime/executor/transfers.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace px {

Transfers::Transfers(const parallel::Program& program, const std::vector<comm::Communicator*>& axes) {
  std::set<int> with_transfers;
  for (const parallel::Instr& instr : program.instrs) {
    if (const auto* s = std::get_if<parallel::Send>(&instr.op)) with_transfers.insert(s->axis);
    if (const auto* r = std::get_if<parallel::Recv>(&instr.op)) with_transfers.insert(r->axis);
  }
  if (program.pipeline.axis >= 0) with_transfers.insert(program.pipeline.axis);
  for (int a : with_transfers) {
    comm::Communicator* axis = axes[static_cast<size_t>(a)];
    PX_CHECK(axis != nullptr, "transfers along axis {} of one rank", a);
    by_axis_[a] = std::make_unique<comm::Communicator>(axis->split(0, program.coords[static_cast<size_t>(a)]));
  }
  const parallel::PipelineLayout& pipeline = program.pipeline;
  if (pipeline.axis < 0) return;
  comm::Communicator* axis = axes[static_cast<size_t>(pipeline.axis)];
  const int me = program.coords[static_cast<size_t>(pipeline.axis)];
  for (const parallel::Subgroup& s : program.subgroups) {
    const bool member = std::find(s.coords.begin(), s.coords.end(), me) != s.coords.end();
    subgroups_.push_back(axis->split(member ? 0 : 1, me));
  }
}

comm::Communicator& Transfers::of(int axis) {
  auto it = by_axis_.find(axis);
  PX_CHECK(it != by_axis_.end(), "no transfers along axis {}", axis);
  return *it->second;
}

int Transfers::world_rank(int axis, int peer) const {
  auto it = by_axis_.find(axis);
  return it == by_axis_.end() ? peer : it->second->world_rank(peer);
}

void Transfers::send(const parallel::Send& op, Tensor value, comm::Communicator& axis) {
  comm::Communicator& comm = of(op.axis);
  // Counted on the axis too: a step's bytes per axis include its transfers.
  axis.count_sent(value.nbytes());
  comm::Request request = comm.isend(op.peer, comm.fixed_tag(op.tag), value.raw(), value.nbytes());
  pending_.push_back({.request = std::move(request), .value = std::move(value), .comm = &comm});
}

void Transfers::recv(const parallel::Recv& op, Tensor& into, const comm::Step& wait) {
  comm::Communicator& comm = of(op.axis);
  comm::Request request = comm.irecv(op.peer, comm.fixed_tag(op.tag), into.raw(), into.nbytes());
  comm.wait(request, wait);
}

void Transfers::finish_sends() {
  for (PendingSend& s : pending_) s.comm->wait(s.request, {.collective = "send", .index = 0});
  pending_.clear();
}

}  // namespace px
