// Shard runs (parallel/shard.h), the geometry of checkpoints that reshard:
// a tensor saved as the runs of every rank under one layout and read back
// under every other layout gives each rank exactly the elements its local
// tensor holds; a missing run leaves elements unwritten; inconsistent runs
// are described.
#include <gtest/gtest.h>

#include <numeric>

#include "core/rng.h"
#include "parallel/shard.h"

namespace px::parallel {
namespace {

// One way to lay a tensor out over ranks: a mesh, a placement on it, and
// how many ZeRO-like runs each rank's local tensor is cut into.
struct Layout {
  const char* name;
  DeviceMesh mesh;
  AxisPlacements placement;
  int runs_per_rank;  // 1: the whole local tensor; k: k uneven runs
};

std::vector<Layout> layouts() {
  const DeviceMesh one({{"dp", 1}});
  const DeviceMesh dp2_tp3({{"dp", 2}, {"tp", 3}});
  const DeviceMesh tp2_tp2({{"a", 2}, {"b", 2}});
  return {
      {"whole", one, {Placement::B()}, 1},
      {"rows over tp=3", dp2_tp3, {Placement::B(), Placement::S(0)}, 1},
      {"columns over dp=2, nested over tp=3", dp2_tp3, {Placement::S(1), Placement::S(1)}, 1},
      {"grouped columns S(1,2) over tp=3", dp2_tp3, {Placement::B(), Placement::S(1, 2)}, 1},
      {"grouped columns, 3 runs per rank", dp2_tp3, {Placement::B(), Placement::S(1, 2)}, 3},
      {"rows then columns", tp2_tp2, {Placement::S(0), Placement::S(1)}, 1},
      {"nested rows, 2 runs per rank", tp2_tp2, {Placement::S(0), Placement::S(0)}, 2},
  };
}

// Every coordinate of `mesh`.
std::vector<std::vector<int>> all_coords(const DeviceMesh& mesh) {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < mesh.ranks(); ++r) out.push_back(mesh.coords(r));
  return out;
}

// The runs every rank holds under `layout`, with their values taken from
// `whole`. The runs cut each local tensor unevenly (the first is shortest).
struct Saved {
  ShardRun run;
  std::vector<float> values;
};
std::vector<Saved> save(const Tensor& whole, const Layout& layout) {
  std::vector<Saved> saved;
  for (const std::vector<int>& coords : all_coords(layout.mesh)) {
    const Shape local = local_shape(whole.shape(), layout.placement, layout.mesh, coords);
    const std::vector<ShardPiece> pieces = shard_pieces(whole.shape(), layout.placement, layout.mesh, coords);
    Tensor l = Tensor::empty(local);
    copy_to_local(whole, pieces, l);
    const int64_t n = local.numel();
    int64_t begin = 0;
    for (int k = 0; k < layout.runs_per_rank; ++k) {
      const int64_t end = k + 1 == layout.runs_per_rank ? n : std::min(n, begin + n / (layout.runs_per_rank + 1));
      saved.push_back({ShardRun::of(whole.shape(), local, pieces, begin, end),
                       std::vector<float>(l.f32() + begin, l.f32() + end)});
      begin = end;
    }
  }
  return saved;
}

Tensor random_tensor(const Shape& shape) {
  Rng rng(7);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(rng.normal());
  return t;
}

TEST(ShardRun, EveryLayoutReadsBackUnderEveryOther) {
  const Tensor whole = random_tensor(Shape{6, 10});
  for (const Layout& from : layouts()) {
    const std::vector<Saved> saved = save(whole, from);
    for (const Layout& to : layouts())
      for (const Saved& want : save(whole, to)) {
        std::vector<float> got(static_cast<size_t>(want.run.count()), -1.0f);
        std::vector<uint8_t> written(got.size(), 0);
        int64_t copied = 0;
        for (const Saved& s : saved)
          if (boxes_meet(s.run, want.run))
            copied += copy_overlap(s.run, s.values.data(), want.run, got.data(), sizeof(float), &written);
        // Replicated layouts save some elements more than once.
        EXPECT_GE(copied, want.run.count()) << from.name << " -> " << to.name;
        EXPECT_EQ(got, want.values) << from.name << " -> " << to.name;
        EXPECT_EQ(std::count(written.begin(), written.end(), 0), 0) << from.name << " -> " << to.name;
      }
  }
}

TEST(ShardRun, AMissingRunLeavesItsElementsUnwritten) {
  const Tensor whole = random_tensor(Shape{6, 10});
  std::vector<Saved> saved = save(whole, layouts()[2]);  // 6 ranks, each a column block
  const int64_t dropped = saved[1].run.count();
  saved.erase(saved.begin() + 1);
  const ShardRun want = ShardRun::whole(whole.shape());
  std::vector<float> got(static_cast<size_t>(want.count()));
  std::vector<uint8_t> written(got.size(), 0);
  for (const Saved& s : saved) copy_overlap(s.run, s.values.data(), want, got.data(), sizeof(float), &written);
  EXPECT_EQ(std::count(written.begin(), written.end(), 0), dropped);
}

TEST(ShardRun, ScalarsAndVectorsAreOnePiece) {
  for (const Shape& shape : {Shape{}, Shape{5}}) {
    const Tensor whole = random_tensor(shape);
    const ShardRun run = ShardRun::whole(shape);
    EXPECT_EQ(run.problem(), "");
    std::vector<float> got(static_cast<size_t>(shape.numel()));
    EXPECT_EQ(copy_overlap(run, whole.f32(), run, got.data(), sizeof(float)), shape.numel());
    EXPECT_EQ(got, std::vector<float>(whole.f32(), whole.f32() + whole.numel()));
  }
}

TEST(ShardRun, InconsistentRunsAreDescribed) {
  ShardRun run = ShardRun::whole(Shape{4, 4});
  run.end = 17;
  EXPECT_NE(run.problem().find("not inside a local tensor of 16"), std::string::npos) << run.problem();
  run = ShardRun::whole(Shape{4, 4});
  run.pieces[0].global_offset = {2, 0};
  EXPECT_NE(run.problem().find("outside"), std::string::npos) << run.problem();
  run = ShardRun::whole(Shape{4, 4});
  run.pieces[0].extent = {2, 4};
  EXPECT_NE(run.problem().find("cover 8 elements"), std::string::npos) << run.problem();
}

}  // namespace
}  // namespace px::parallel
