// This rank's communicators for a Program: one per mesh axis, the data
// path's (data x context ranks under context parallelism), and the
// transfers between pipeline stages and around the context ring with the
// pipeline's subgroups (transfers.h). Every instruction that talks to other
// ranks names its group (Program::groups); communicator_of finds it.
#pragma once

#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "parallel/mesh.h"
#include "parallel/program.h"
#include "runtime/executor/transfers.h"

namespace px {

// The caller's communicators: one on each mesh axis, by axis index
// (nullptr: the axis has one rank; empty: one rank everywhere), and under
// context parallelism the data path's, over data x context ranks
// (parallel::MeshGroups::data).
struct AxisGroups {
  std::vector<comm::Communicator*> axis;
  comm::Communicator* data = nullptr;
};
// Pointers into `mesh`, which must outlive the executor.
AxisGroups axis_groups(parallel::MeshGroups& mesh);

class RankGroups {
 public:
  // Checks `groups` against the program's mesh (px::Error naming the axis
  // whose size differs); collective over the axes with transfers.
  RankGroups(const parallel::Program& program, AxisGroups groups);

  // nullptr: the axis has one rank.
  comm::Communicator* axis(int axis) const { return axis_[static_cast<size_t>(axis)]; }
  size_t axes() const { return axis_.size(); }
  // The data path's: the data axis, joined with the context axis under
  // context parallelism (nullptr: one rank).
  comm::Communicator* data_path() const { return data_path_; }
  int data_path_size() const { return data_path_ ? data_path_->size() : 1; }
  // The communicator of the group instruction `instr` names (nullptr: one rank).
  comm::Communicator* communicator_of(const parallel::Program& program, const parallel::Instr& instr);
  Transfers& transfers() { return *transfers_; }

 private:
  std::vector<comm::Communicator*> axis_;
  comm::Communicator* joined_ = nullptr;     // AxisGroups::data
  comm::Communicator* data_path_ = nullptr;  // joined_, or the data axis'
  std::optional<Transfers> transfers_;       // made once the axes are checked
};

}  // namespace px
