// The trainer end to end on tiny models: resume reproduces an uninterrupted
// run bitwise, gradient accumulation matches the full batch, and bad
// configs or checkpoints fail with errors that name the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/rng.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/launch/launch.h"
#include "testing/scratch_dir.h"
#include "testing/tiny_jobs.h"

namespace px {
namespace {

using testing::ScratchDir;

using testing::tiny_gpt;
using testing::write_text;

class TrainerAtThreads : public ::testing::TestWithParam<int> {};

TEST_P(TrainerAtThreads, ResumedRunReachesTheSameLossesBitwise) {
  ScratchDir dir;
  TrainOptions o = tiny_gpt(write_text(dir));
  o.threads = GetParam();
  std::ostringstream log;
  TrainResult full = train(o, log);
  ASSERT_EQ(full.losses.size(), 8u);

  TrainOptions first = o;
  first.save = dir.file("ckpt");
  first.stop_after = 3;
  TrainResult head = train(first, log);
  ASSERT_EQ(head.losses.size(), 3u);

  TrainOptions rest = o;
  rest.resume = dir.file("ckpt");
  TrainResult tail = train(rest, log);
  ASSERT_EQ(tail.losses.size(), 5u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(head.losses[i], full.losses[i]) << "step " << i + 1;
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(tail.losses[i], full.losses[i + 3]) << "step " << i + 4;
  EXPECT_EQ(tail.evaluation.loss, full.evaluation.loss);
}

INSTANTIATE_TEST_SUITE_P(Threads, TrainerAtThreads, ::testing::Values(1, 2));

TEST(Trainer, GradientAccumulationMatchesTheFullBatch) {
  ScratchDir dir;
  TrainOptions o = tiny_gpt(write_text(dir));
  o.gpt.dropout = 0;
  o.steps = 4;
  o.schedule.total = 4;
  std::ostringstream log;
  TrainResult whole = train(o, log);
  o.accumulation = 2;
  TrainResult accumulated = train(o, log);
  for (size_t i = 0; i < whole.losses.size(); ++i)
    EXPECT_NEAR(accumulated.losses[i], whole.losses[i], 1e-5 * std::abs(whole.losses[i])) << "step " << i + 1;
}

TEST(Trainer, TrainingReducesTheLoss) {
  ScratchDir dir;
  TrainOptions o = tiny_gpt(write_text(dir));
  o.steps = 60;
  o.schedule.total = 60;
  o.gpt.dropout = 0;
  o.schedule.lr = 1e-2;
  std::ostringstream log;
  TrainResult r = train(o, log);
  // Uniform guessing over 256 bytes is ln 256 = 5.55; the text uses 21 distinct bytes.
  EXPECT_NEAR(r.losses.front(), std::log(256.0), 0.05);
  EXPECT_LT(r.losses.back(), 0.6 * r.losses.front());
  EXPECT_LT(r.evaluation.loss, 3.0);
}

void expect_error(TrainOptions o, const std::vector<std::string>& fragments) {
  std::ostringstream log;
  try {
    train(o, log);
    FAIL() << "expected px::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
}

TEST(Trainer, ImpossibleConfigsAreNamedErrors) {
  ScratchDir dir;
  TrainOptions o = tiny_gpt(write_text(dir));
  TrainOptions heads = o;
  heads.gpt.n_head = 3;
  expect_error(heads, {"n_embd=16", "n_head=3"});
  TrainOptions batch = o;
  batch.batch = 0;
  expect_error(batch, {"batch", "0"});
  TrainOptions lr = o;
  lr.schedule.lr = -0.1;
  expect_error(lr, {"learning rate", "-0.1"});
  TrainOptions model = o;
  model.model = "resnet";
  expect_error(model, {"resnet", "mlp, cnn, gpt or a FILE.onnx"});
  TrainOptions data = o;
  data.data = dir.file("missing.txt");
  expect_error(data, {"missing.txt"});
}

TEST(Checkpoint, ShapeMismatchNamesTheTensorAndBothShapes) {
  ScratchDir dir;
  TrainOptions o = tiny_gpt(write_text(dir));
  o.steps = 1;
  o.save = dir.file("ckpt");
  std::ostringstream log;
  train(o, log);
  nn::GptConfig wider = o.gpt;
  wider.n_embd = 32;
  ParamStore params = ParamStore::initialize(nn::build_gpt(wider, 1, 4, false).graph, 0);
  try {
    params.load(load_model_weights(dir.file("ckpt")));
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("wte.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[256,16]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[256,32]"), std::string::npos) << msg;
  }
}

TEST(Checkpoint, TruncatedCheckpointIsANamedErrorAndResumeRefusesIt) {
  ScratchDir dir;
  TrainOptions o = tiny_gpt(write_text(dir));
  o.steps = 1;
  o.save = dir.file("ckpt");
  std::ostringstream log;
  train(o, log);
  std::string model = dir.file("ckpt") + "/model.safetensors";
  std::filesystem::resize_file(model, std::filesystem::file_size(model) / 2);
  TrainOptions resume = o;
  resume.resume = dir.file("ckpt");
  resume.steps = 2;
  expect_error(resume, {"model.safetensors"});
}

}  // namespace
}  // namespace px
