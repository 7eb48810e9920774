// Transfers (Send / Recv) on this rank: between pipeline stages, and along
// context parallelism's ring passing key/value blocks. Each axis with
// transfers runs them on its communicator split once more, whose tags are
// the program's own (unique per micro-batch, cut, direction and value), so
// they can never match a collective's message on that axis (the loss, the
// gradient norm, a shared parameter's gradient sum). Also the pipeline's
// subgroups (Program::subgroups), one communicator each.
//
// Sends never block: the value is posted and kept alive until the step
// ends (finish_sends; the schedule was proven free of deadlock under
// exactly that rule); a receive waits for its value.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "parallel/program.h"

namespace px {

class Transfers {
 public:
  // Collective over every axis of `program` with transfers and over its
  // pipeline axis, in axis order (every rank of an axis has the same axes
  // with transfers and lists the same subgroups). `axes`: this rank's
  // communicator on each mesh axis (nullptr: one rank).
  Transfers(const parallel::Program& program, const std::vector<comm::Communicator*>& axes);

  // Posts `value` (its bytes counted as sent on `axis`, the mesh axis'
  // communicator) to op.peer; it stays alive until finish_sends.
  void send(const parallel::Send& op, Tensor value, comm::Communicator& axis);
  // Receives op's value into `into` (allocated, its bytes what the peer
  // sends); `wait` names the wait for a timeout's error.
  void recv(const parallel::Recv& op, Tensor& into, const comm::Step& wait);
  // Waits for every send posted.
  void finish_sends();

  // The world rank of `peer` on axis `axis`'s transfers (`peer` itself
  // when the axis has none).
  int world_rank(int axis, int peer) const;
  comm::Communicator& subgroup(int index) { return subgroups_.at(static_cast<size_t>(index)); }

 private:
  comm::Communicator& of(int axis);

  std::map<int, std::unique_ptr<comm::Communicator>> by_axis_;
  std::vector<comm::Communicator> subgroups_;
  struct PendingSend {
    comm::Request request;
    Tensor value;  // kept alive until sent
    comm::Communicator* comm = nullptr;
  };
  std::vector<PendingSend> pending_;
};

}  // namespace px
