// The collective checkpoint protocol (runtime/checkpoint/checkpoint.h) on in-process
// ranks: every rank writes its runs, the lead the model and the state; a
// failure on any rank reaches every rank and leaves the previous
// checkpoint; a missing, truncated or unlisted shard file is a named error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>

#include "comm/backends.h"
#include "core/error.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/launch/job_spec.h"
#include "runtime/tasks/model_json.h"
#include "testing/scratch_dir.h"

namespace px {
namespace {

namespace fs = std::filesystem;
constexpr int kRanks = 3;

// A [6, 4] tensor "w" whose element i is i.
Tensor whole_w() {
  Tensor t = Tensor::empty(Shape{6, 4});
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(i);
  return t;
}

// Rank r's part: rows [2r, 2r + 2) of "w" (its "exp_avg" too, times 10);
// `duplicate` makes the rank save one name twice, which its write refuses.
CheckpointPart part_of(int rank, const Tensor& whole, const ParamStore& model, bool duplicate = false) {
  const parallel::ShardRun run =
      parallel::ShardRun::of(whole.shape(), Shape{2, 4}, {{{2 * rank, 0}, {0, 0}, {2, 4}}}, 0, 8);
  Tensor rows = Tensor::empty(Shape{8});
  Tensor state = Tensor::empty(Shape{8});
  for (int i = 0; i < 8; ++i) {
    rows.f32()[i] = whole.f32()[8 * rank + i];
    state.f32()[i] = 10 * rows.f32()[i];
  }
  CheckpointPart part{.shards = {{"w", run, rows}, {duplicate ? "w" : "w.exp_avg", run, state}},
                      .who = {{"mesh", "{dp:3}"}, {"coords", fmt::format("[{}]", rank)}}};
  if (rank == 0) {
    part.model = model.named();
    part.state = {.step = 7, .config = {{"model", "test"}}, .data = {{"step", 7}}, .optimizer_steps = 7};
  }
  return part;
}

// Saves on kRanks in-process ranks; returns each rank's error ("" if none).
std::vector<std::string> save_on_ranks(const std::string& dir, int failing_rank = -1) {
  const Tensor whole = whole_w();
  const ParamStore model = ParamStore::of({{"w", whole}});
  std::vector<std::string> errors(kRanks);
  comm::run_inproc(kRanks, [&](comm::Communicator& world) {
    try {
      save_checkpoint(dir, &world, part_of(world.rank(), whole, model, world.rank() == failing_rank));
    } catch (const Error& e) {
      errors[static_cast<size_t>(world.rank())] = e.what();
    }
  });
  return errors;
}

std::vector<std::string> leftovers(const std::string& dir) {
  std::vector<std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) out.push_back(e.path().string());
  return out;
}

TEST(CollectiveCheckpoint, EveryRankWritesItsShardFileAndTheLeadTheRest) {
  testing::ScratchDir dir;
  const std::string ckpt = dir.file("ckpt");
  EXPECT_EQ(save_on_ranks(ckpt), std::vector<std::string>(kRanks));
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(fs::exists(fmt::format("{}/shards/rank{}.safetensors", ckpt, r)));
  const Checkpoint c = load_checkpoint(ckpt);
  EXPECT_EQ(c.state.step, 7);
  EXPECT_EQ(c.state.files.size(), 4u);  // three shard files and the model
  const Tensor w = c.shards.read_whole("w", Shape{6, 4});
  const Tensor m = c.shards.read_whole("w.exp_avg", Shape{6, 4});
  for (int64_t i = 0; i < w.numel(); ++i) {
    EXPECT_EQ(w.f32()[i], static_cast<float>(i));
    EXPECT_EQ(m.f32()[i], 10.0f * static_cast<float>(i));
  }
  // A rank of another split reads its columns [1, 3) of rows [3, 6).
  const parallel::ShardRun cols =
      parallel::ShardRun::of(Shape{6, 4}, Shape{3, 2}, {{{3, 1}, {0, 0}, {3, 2}}}, 0, 6);
  const Tensor part = c.shards.read("w", cols);
  EXPECT_EQ(std::vector<float>(part.f32(), part.f32() + 6), (std::vector<float>{13, 14, 17, 18, 21, 22}));
  EXPECT_EQ(load_model_weights(ckpt).at("w").f32()[23], 23.0f);
  EXPECT_TRUE(leftovers(dir.path()).empty());
}

TEST(CollectiveCheckpoint, AFailingRankReachesEveryRankAndKeepsThePreviousCheckpoint) {
  testing::ScratchDir dir;
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(save_on_ranks(ckpt), std::vector<std::string>(kRanks));
  const std::vector<std::string> errors = save_on_ranks(ckpt, 1);
  EXPECT_NE(errors[1].find("'w' is saved twice"), std::string::npos) << errors[1];
  for (int r : {0, 2}) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("rank 1 failed"), std::string::npos)
        << errors[static_cast<size_t>(r)];
    EXPECT_NE(errors[static_cast<size_t>(r)].find(ckpt), std::string::npos) << errors[static_cast<size_t>(r)];
  }
  const Checkpoint c = load_checkpoint(ckpt);  // the first save, whole
  EXPECT_EQ(c.shards.read_whole("w", Shape{6, 4}).f32()[5], 5.0f);
  EXPECT_TRUE(leftovers(dir.path()).empty());
}

TEST(CollectiveCheckpoint, AnUncreatableDirectoryIsAnErrorOnEveryRank) {
  testing::ScratchDir dir;
  std::ofstream(dir.file("file")) << "not a directory";
  const std::vector<std::string> errors = save_on_ranks(dir.file("file/ckpt"));
  // Every rank finds it cannot write there (while learning which ranks
  // share the directory's filesystem), naming the directory and why.
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("checkpoint '" + dir.file("file/ckpt") + "' not saved: cannot write"),
              std::string::npos)
        << errors[static_cast<size_t>(r)];
    EXPECT_NE(errors[static_cast<size_t>(r)].find("Not a directory"), std::string::npos) << errors[static_cast<size_t>(r)];
  }
}

TEST(LoadCheckpoint, AMissingOrTruncatedShardFileIsNamed) {
  testing::ScratchDir dir;
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(save_on_ranks(ckpt), std::vector<std::string>(kRanks));
  const std::string shard = ckpt + "/shards/rank1.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 4);
  try {
    load_checkpoint(ckpt);
    FAIL() << "a truncated shard file loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'shards/rank1.safetensors' has"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  fs::remove(shard);
  try {
    load_checkpoint(ckpt);
    FAIL() << "a checkpoint without a shard file loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'shards/rank1.safetensors' is missing"), std::string::npos) << e.what();
  }
}

// A damaged or hand-edited state.json (found by fuzz/checkpoint_state_fuzzer.cc
// and its corpus): each field a resume reads is refused by name when it is
// missing or of the wrong type, and a listed file must lie inside the checkpoint.
TEST(LoadCheckpoint, AStateJsonWithABadFieldIsNamed) {
  testing::ScratchDir dir;
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(save_on_ranks(ckpt), std::vector<std::string>(kRanks));
  nlohmann::json good;
  std::ifstream(ckpt + "/state.json") >> good;
  const auto expect_refused = [&](const std::function<void(nlohmann::json&)>& damage, const std::string& fragment) {
    nlohmann::json state = good;
    damage(state);
    std::ofstream(ckpt + "/state.json", std::ios::trunc) << state.dump();
    try {
      load_checkpoint(ckpt);
      ADD_FAILURE() << "loaded a state.json damaged to " << state.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_refused([](auto& s) { s.erase("optimizer_steps"); }, "'optimizer_steps' is missing");
  expect_refused([](auto& s) { s["step"] = 1e300; }, "'step' is 1e+300, expected a non-negative integer");
  expect_refused([](auto& s) { s["step"] = -3; }, "'step' is -3");
  expect_refused([](auto& s) { s["ranks"] = 0; }, "'ranks' is 0, expected a rank count");
  expect_refused([](auto& s) { s["bad_batches"] = {1, "two"}; }, "'bad_batches' is [1,\"two\"]");
  expect_refused([](auto& s) { s["files"]["../outside"] = 3; }, "file '../outside', expected a path inside");
  expect_refused([](auto& s) { s["files"]["/etc/passwd"] = 3; }, "file '/etc/passwd', expected a path inside");
  expect_refused([](auto& s) { s["files"]["model.safetensors"] = "big"; }, "records \"big\" bytes");
  expect_refused([](auto& s) { s = nlohmann::json::array(); }, "state.json is [], expected a JSON object");
}

// The model config a resume applies: sizes are integers in range, the kind
// one parallax knows (a JSON 1e300 once converted to int64 unchecked).
TEST(LoadCheckpoint, AModelConfigWithABadFieldIsNamed) {
  const nlohmann::json gpt = {{"model", "gpt"},
                              {"gpt", {{"vocab", 256}, {"block", 8}, {"n_layer", 1}, {"n_head", 1}, {"n_embd", 8}, {"dropout", 0.0}}}};
  JobSpec o;
  apply_model_json(gpt, o.model, o.data);
  EXPECT_EQ(o.model.gpt.n_embd, 8);
  const auto expect_refused = [&](nlohmann::json config, const std::string& fragment) {
    try {
      JobSpec options;
      apply_model_json(config, options.model, options.data);
      ADD_FAILURE() << "applied " << config.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  nlohmann::json huge = gpt;
  huge["gpt"]["vocab"] = 1e300;
  expect_refused(huge, "gpt.vocab is 1e+300, expected an integer");
  nlohmann::json missing = gpt;
  missing["gpt"].erase("n_head");
  expect_refused(missing, "gpt.n_head is missing");
  expect_refused({{"model", "resnet"}}, "model is 'resnet', expected gpt, mlp, cnn or a FILE.onnx");
  expect_refused({{"model", "mlp"}, {"mlp", {{"inputs", 4}, {"hidden", {8, "x"}}, {"classes", 2}}}},
                 "mlp.hidden[1] is \"x\", expected an integer");
  expect_refused(nlohmann::json::array(), "expected a JSON object");
}

// Without the file list's help (the file and its entry both gone), the
// elements nobody holds are named.
TEST(LoadCheckpoint, ElementsNoShardHoldsAreNamed) {
  testing::ScratchDir dir;
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(save_on_ranks(ckpt), std::vector<std::string>(kRanks));
  fs::remove(ckpt + "/shards/rank2.safetensors");
  nlohmann::json state;
  std::ifstream(ckpt + "/state.json") >> state;
  state["files"].erase("shards/rank2.safetensors");
  state["checksums"].erase("shards/rank2.safetensors");
  std::ofstream(ckpt + "/state.json") << state.dump();
  const Checkpoint c = load_checkpoint(ckpt);
  try {
    c.shards.read_whole("w", Shape{6, 4});
    FAIL() << "rows 4 and 5 of 'w' are in no shard file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no shard file holds element [4,0] of tensor 'w'"), std::string::npos)
        << e.what();
  }
  // What the remaining files hold still reads.
  EXPECT_EQ(c.shards.read("w", parallel::ShardRun::of(Shape{6, 4}, Shape{4, 4}, {{{0, 0}, {0, 0}, {4, 4}}}, 0, 16))
                .f32()[15],
            15.0f);
}


// Hosts with private disks, in process: ranks 0 and 1 see one directory,
// ranks 2 and 3 another of the same name on "their" disk. The commit is
// agreed over the transport (commit.h), each disk gets the commit record
// of its own ranks' shards, and a resume agrees on a step every disk has.
namespace private_disks {

constexpr int kRanks = 4;

std::string disk_of(const std::string& base, int rank) { return fmt::format("{}/host{}", base, rank / 2); }

// Rank r holds rows [2r, 2r + 2) of an [8, 4] "w" whose element i is i + step.
CheckpointPart part_of(int rank, int64_t step, bool duplicate) {
  const parallel::ShardRun run =
      parallel::ShardRun::of(Shape{8, 4}, Shape{2, 4}, {{{2 * rank, 0}, {0, 0}, {2, 4}}}, 0, 8);
  Tensor rows = Tensor::empty(Shape{8});
  for (int i = 0; i < 8; ++i) rows.f32()[i] = static_cast<float>(8 * rank + i + step);
  CheckpointPart part{.shards = {{"w", run, rows}, {duplicate ? "w" : "w.exp_avg", run, rows.clone()}},
                      .who = {{"mesh", "{dp:4}"}, {"coords", fmt::format("[{}]", rank)}}};
  if (rank == 0) {
    Tensor whole = Tensor::empty(Shape{8, 4});
    for (int64_t i = 0; i < whole.numel(); ++i) whole.f32()[i] = static_cast<float>(i + step);
    part.model = {{"w", whole}};
    part.state = {.step = step, .config = {{"model", "test"}}, .data = {{"step", step}}, .optimizer_steps = step};
  }
  return part;
}

// Saves step `step` with every rank writing to its host's disk; each rank's error.
std::vector<std::string> save(const std::string& base, int64_t step, int failing_rank = -1) {
  std::vector<std::string> errors(kRanks);
  comm::run_inproc(kRanks, [&](comm::Communicator& world) {
    const int rank = world.rank();
    try {
      CheckpointWriter writer(disk_of(base, rank) + "/ckpt", &world);
      EXPECT_FALSE(writer.shared());
      writer.save(part_of(rank, step, rank == failing_rank));
      writer.finish();
    } catch (const Error& e) {
      errors[static_cast<size_t>(rank)] = e.what();
    }
  });
  return errors;
}

TEST(PrivateDisksCheckpoint, EachDiskCommitsItsOwnRanksShardsAndRank0TheModel) {
  testing::ScratchDir dir;
  ASSERT_EQ(save(dir.path(), 7), std::vector<std::string>(kRanks));
  for (int host = 0; host < 2; ++host) {
    const std::string ckpt = disk_of(dir.path(), 2 * host) + "/ckpt";
    const Checkpoint c = load_checkpoint(ckpt);
    EXPECT_EQ(c.state.step, 7);
    EXPECT_EQ(c.state.files.contains("model.safetensors"), host == 0);
    EXPECT_EQ(c.state.checksums.size(), 2u);  // its two ranks' shard files, checked on load
    for (int r = 0; r < kRanks; ++r)
      EXPECT_EQ(fs::exists(fmt::format("{}/shards/rank{}.safetensors", ckpt, r)), r / 2 == host) << ckpt << " " << r;
    // This host's rows read back; no probe or staging directory is left.
    const parallel::ShardRun rows =
        parallel::ShardRun::of(Shape{8, 4}, Shape{4, 4}, {{{4 * host, 0}, {0, 0}, {4, 4}}}, 0, 16);
    EXPECT_EQ(c.shards.read("w.exp_avg", rows).f32()[3], static_cast<float>(16 * host + 3 + 7));
    EXPECT_TRUE(leftovers(disk_of(dir.path(), 2 * host)).empty());
  }
}

TEST(PrivateDisksCheckpoint, AFailureOnOneHostKeepsThePreviousCheckpointOnEvery) {
  testing::ScratchDir dir;
  ASSERT_EQ(save(dir.path(), 7), std::vector<std::string>(kRanks));
  const std::vector<std::string> errors = save(dir.path(), 9, 3);
  EXPECT_NE(errors[3].find("'w' is saved twice"), std::string::npos) << errors[3];
  for (int r : {0, 1, 2})
    EXPECT_NE(errors[static_cast<size_t>(r)].find("rank 3 failed"), std::string::npos) << errors[static_cast<size_t>(r)];
  for (int host = 0; host < 2; ++host) {
    EXPECT_EQ(load_checkpoint(disk_of(dir.path(), 2 * host) + "/ckpt").state.step, 7);
    EXPECT_TRUE(leftovers(disk_of(dir.path(), 2 * host)).empty());
  }
}

TEST(PrivateDisksCheckpoint, AResumeAgreesOnTheNewestStepEveryHostCommitted) {
  testing::ScratchDir dir;
  ASSERT_EQ(save(dir.path(), 7), std::vector<std::string>(kRanks));
  ASSERT_EQ(save(dir.path(), 9), std::vector<std::string>(kRanks));
  // Host 1 died before swapping step 9 in: it has step 7 only.
  const std::string host1 = disk_of(dir.path(), 2) + "/ckpt";
  fs::remove_all(host1);
  fs::rename(kept_checkpoint_path(host1, 7), host1);
  std::vector<std::string> agreed(kRanks), empty(kRanks);
  comm::run_inproc(kRanks, [&](comm::Communicator& world) {
    const int rank = world.rank();
    agreed[static_cast<size_t>(rank)] = agreed_checkpoint(disk_of(dir.path(), rank) + "/ckpt", &world, false);
    empty[static_cast<size_t>(rank)] = agreed_checkpoint(disk_of(dir.path(), rank) + "/none", &world, true);
  });
  const std::string host0 = disk_of(dir.path(), 0) + "/ckpt";
  EXPECT_EQ(agreed, (std::vector<std::string>{kept_checkpoint_path(host0, 7), kept_checkpoint_path(host0, 7), host1,
                                              host1}));
  EXPECT_EQ(empty, std::vector<std::string>(kRanks));  // no checkpoint anywhere: start afresh
  EXPECT_EQ(load_checkpoint(agreed[0]).state.step, 7);
}

TEST(PrivateDisksCheckpoint, AShardFileWithAnotherChecksumIsRefused) {
  testing::ScratchDir dir;
  ASSERT_EQ(save(dir.path(), 7), std::vector<std::string>(kRanks));
  const std::string shard = disk_of(dir.path(), 2) + "/ckpt/shards/rank2.safetensors";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  try {
    load_checkpoint(disk_of(dir.path(), 2) + "/ckpt");
    FAIL() << "a changed shard file loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'shards/rank2.safetensors' does not have the checksum"), std::string::npos)
        << e.what();
  }
}

}  // namespace private_disks
}  // namespace
}  // namespace px
