// DeviceMesh: ranks arranged on named axes, e.g. {pp:2, dp:4, tp:2} over 16
// ranks, row-major (the last axis varies fastest). A rank's groups along each
// axis (the ranks that differ from it only in that axis' coordinate) are
// the communicators the lowering's collectives run on.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "comm/communicator.h"

namespace px::parallel {

struct MeshAxis {
  std::string name;
  int size = 1;
  bool operator==(const MeshAxis&) const = default;
};

class DeviceMesh {
 public:
  DeviceMesh() = default;
  // Sizes must be >= 1 and names unique (px::Error otherwise).
  explicit DeviceMesh(std::vector<MeshAxis> axes);
  static DeviceMesh data_parallel(int ranks) { return DeviceMesh({{"dp", ranks}}); }

  const std::vector<MeshAxis>& axes() const { return axes_; }
  int ranks() const;
  // Index of the axis named `name`; px::Error naming the mesh if absent.
  int axis(const std::string& name) const;
  int size(const std::string& name) const { return axes_[static_cast<size_t>(axis(name))].size; }
  std::vector<int> coords(int rank) const;
  int rank_of(const std::vector<int>& coords) const;
  std::string str() const;  // "{dp:4}"
  bool operator==(const DeviceMesh&) const = default;

 private:
  std::vector<MeshAxis> axes_;
};

// A rank's place in the group of ranks that differ from it only along
// axes `outer` and `inner` (-1: only along `outer`): outer coordinate,
// then inner.
int joined_coordinate(const DeviceMesh& mesh, const std::vector<int>& coords, int outer, int inner);

// This rank's communicator along every axis of the mesh, split from `world`
// (collective: every rank of the world calls it). world.size() must equal
// mesh.ranks().
struct MeshGroups {
  std::vector<comm::Communicator> axis;  // by axis index
  // Context parallelism's data path (Strategy::context): the ranks that
  // differ only along the data and the context axis, ordered by
  // joined_coordinate. std::nullopt without a context axis.
  std::optional<comm::Communicator> data;
};
// `data_axis` and `context_axis` >= 0 (indices): MeshGroups::data too.
MeshGroups make_mesh_groups(comm::Communicator& world, const DeviceMesh& mesh, int data_axis = -1,
                            int context_axis = -1);
// What automatic chooses among on each group (comm::algorithm_menu): per
// axis, then MeshGroups::data's when there is one (LowerRequest::menus).
std::vector<comm::AlgorithmMenu> algorithm_menus(MeshGroups& groups);

}  // namespace px::parallel
