#include "parallel/mesh.h"

#include <set>

#include "core/error.h"

namespace px::parallel {

DeviceMesh::DeviceMesh(std::vector<MeshAxis> axes) : axes_(std::move(axes)) {
  std::set<std::string> names;
  for (const MeshAxis& a : axes_) {
    if (a.size < 1) fail("device mesh axis '{}' has size {}: expected at least 1", a.name, a.size);
    if (!names.insert(a.name).second) fail("device mesh names axis '{}' twice", a.name);
  }
}

int DeviceMesh::ranks() const {
  int n = 1;
  for (const MeshAxis& a : axes_) n *= a.size;
  return n;
}

int DeviceMesh::axis(const std::string& name) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].name == name) return static_cast<int>(i);
  fail("device mesh {} has no axis '{}'", str(), name);
}

std::vector<int> DeviceMesh::coords(int rank) const {
  if (rank < 0 || rank >= ranks()) fail("rank {} is outside device mesh {} of {} ranks", rank, str(), ranks());
  std::vector<int> c(axes_.size());
  for (size_t i = axes_.size(); i-- > 0;) {
    c[i] = rank % axes_[i].size;
    rank /= axes_[i].size;
  }
  return c;
}

int DeviceMesh::rank_of(const std::vector<int>& coords) const {
  PX_CHECK_EQ(coords.size(), axes_.size());
  int rank = 0;
  for (size_t i = 0; i < axes_.size(); ++i) rank = rank * axes_[i].size + coords[i];
  return rank;
}

std::string DeviceMesh::str() const {
  std::string s = "{";
  for (size_t i = 0; i < axes_.size(); ++i)
    s += fmt::format("{}{}:{}", i ? ", " : "", axes_[i].name, axes_[i].size);
  return s + "}";
}

int joined_coordinate(const DeviceMesh& mesh, const std::vector<int>& coords, int outer, int inner) {
  const int o = coords[static_cast<size_t>(outer)];
  if (inner < 0) return o;
  return o * mesh.axes()[static_cast<size_t>(inner)].size + coords[static_cast<size_t>(inner)];
}

std::vector<comm::AlgorithmMenu> algorithm_menus(MeshGroups& groups) {
  std::vector<comm::AlgorithmMenu> menus;
  for (comm::Communicator& c : groups.axis) menus.push_back(comm::algorithm_menu(c));
  if (groups.data) menus.push_back(comm::algorithm_menu(*groups.data));
  return menus;
}

MeshGroups make_mesh_groups(comm::Communicator& world, const DeviceMesh& mesh, int data_axis, int context_axis) {
  if (world.size() != mesh.ranks())
    fail("device mesh {} needs {} ranks, the job has {}", mesh.str(), mesh.ranks(), world.size());
  MeshGroups groups;
  const std::vector<int> mine = mesh.coords(world.rank());
  for (size_t a = 0; a < mesh.axes().size(); ++a) {
    // Ranks that agree on every other coordinate share a group along axis a;
    // the color is this rank's position with axis a's coordinate zeroed.
    std::vector<int> others = mine;
    others[a] = 0;
    groups.axis.push_back(world.split(mesh.rank_of(others), mine[a]));
  }
  if (data_axis >= 0 && context_axis >= 0) {
    std::vector<int> others = mine;
    others[static_cast<size_t>(data_axis)] = 0;
    others[static_cast<size_t>(context_axis)] = 0;
    groups.data = world.split(mesh.rank_of(others), joined_coordinate(mesh, mine, data_axis, context_axis));
  }
  return groups;
}

}  // namespace px::parallel
