#include "runtime/executor/rank_groups.h"

#include <algorithm>

#include "core/error.h"

namespace px {

AxisGroups axis_groups(parallel::MeshGroups& mesh) {
  AxisGroups groups;
  for (comm::Communicator& c : mesh.axis) groups.axis.push_back(&c);
  if (mesh.data) groups.data = &*mesh.data;
  return groups;
}

RankGroups::RankGroups(const parallel::Program& program, AxisGroups groups)
    : axis_(std::move(groups.axis)), joined_(groups.data) {
  const auto& axes = program.strategy.mesh.axes();
  if (axis_.empty()) axis_.assign(axes.size(), nullptr);
  if (axis_.size() != axes.size())
    fail("the program's mesh {} has {} axes, the executor was given {} groups", program.strategy.mesh.str(),
         axes.size(), axis_.size());
  for (size_t a = 0; a < axes.size(); ++a) {
    const int size = axis_[a] ? axis_[a]->size() : 1;
    if (size != axes[a].size)
      fail("the program's mesh axis '{}' has {} ranks, its communicator {}", axes[a].name, axes[a].size, size);
    if (size == 1) axis_[a] = nullptr;
  }
  transfers_.emplace(program, axis_);
  // Under context or expert parallelism the data path spans that axis too.
  const bool joined = std::any_of(program.groups.begin(), program.groups.end(),
                                  [](const parallel::CommGroup& g) { return g.joined_axis >= 0; });
  if (joined) {
    const int axis = parallel::joined_axis(program.strategy);
    const int expected = program.strategy.data_ranks() * (axis >= 0 ? axes[static_cast<size_t>(axis)].size : 1);
    if (joined_ == nullptr || joined_->size() != expected)
      fail("the program's data path spans {} ranks (data x {} axes), the executor was given a group of {}",
           expected, axis >= 0 ? axes[static_cast<size_t>(axis)].name : "?", joined_ ? joined_->size() : 0);
  }
  data_path_ = joined ? joined_ : axis_[static_cast<size_t>(program.strategy.mesh.axis(program.strategy.data_axis))];
}

comm::Communicator* RankGroups::communicator_of(const parallel::Program& program, const parallel::Instr& instr) {
  const parallel::CommGroup& group = program.groups[static_cast<size_t>(instr.group)];
  if (group.subgroup >= 0) return &transfers_->subgroup(group.subgroup);
  return group.joined_axis >= 0 ? joined_ : axis_[static_cast<size_t>(group.axis)];
}

}  // namespace px
