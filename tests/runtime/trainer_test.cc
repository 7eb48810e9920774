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
  JobSpec o = tiny_gpt(write_text(dir));
  o.run.threads = GetParam();
  std::ostringstream log;
  JobResult full = train(o, log);
  ASSERT_EQ(full.run.losses.size(), 8u);

  JobSpec first = o;
  first.checkpoint.save = dir.file("ckpt");
  first.run.stop_after = 3;
  JobResult head = train(first, log);
  ASSERT_EQ(head.run.losses.size(), 3u);

  JobSpec rest = o;
  rest.checkpoint.resume = dir.file("ckpt");
  JobResult tail = train(rest, log);
  ASSERT_EQ(tail.run.losses.size(), 5u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(head.run.losses[i], full.run.losses[i]) << "step " << i + 1;
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(tail.run.losses[i], full.run.losses[i + 3]) << "step " << i + 4;
  EXPECT_EQ(tail.run.evaluation.loss, full.run.evaluation.loss);
}

INSTANTIATE_TEST_SUITE_P(Threads, TrainerAtThreads, ::testing::Values(1, 2));

TEST(Trainer, GradientAccumulationMatchesTheFullBatch) {
  ScratchDir dir;
  JobSpec o = tiny_gpt(write_text(dir));
  o.model.gpt.dropout = 0;
  o.run.steps = 4;
  o.optimizer.schedule.total = 4;
  std::ostringstream log;
  JobResult whole = train(o, log);
  o.strategy.micro_batches = 2;
  JobResult accumulated = train(o, log);
  for (size_t i = 0; i < whole.run.losses.size(); ++i)
    EXPECT_NEAR(accumulated.run.losses[i], whole.run.losses[i], 1e-5 * std::abs(whole.run.losses[i])) << "step " << i + 1;
}

TEST(Trainer, TrainingReducesTheLoss) {
  ScratchDir dir;
  JobSpec o = tiny_gpt(write_text(dir));
  o.run.steps = 60;
  o.optimizer.schedule.total = 60;
  o.model.gpt.dropout = 0;
  o.optimizer.schedule.lr = 1e-2;
  std::ostringstream log;
  JobResult r = train(o, log);
  // Uniform guessing over 256 bytes is ln 256 = 5.55; the text uses 21 distinct bytes.
  EXPECT_NEAR(r.run.losses.front(), std::log(256.0), 0.05);
  EXPECT_LT(r.run.losses.back(), 0.6 * r.run.losses.front());
  EXPECT_LT(r.run.evaluation.loss, 3.0);
}

void expect_error(JobSpec o, const std::vector<std::string>& fragments) {
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
  JobSpec o = tiny_gpt(write_text(dir));
  JobSpec heads = o;
  heads.model.gpt.n_head = 3;
  expect_error(heads, {"n_embd=16", "n_head=3"});
  JobSpec batch = o;
  batch.data.batch = 0;
  expect_error(batch, {"batch", "0"});
  JobSpec lr = o;
  lr.optimizer.schedule.lr = -0.1;
  expect_error(lr, {"learning rate", "-0.1"});
  JobSpec model = o;
  model.model.kind = "resnet";
  expect_error(model, {"resnet", "mlp, cnn, gpt or a FILE.onnx"});
  JobSpec data = o;
  data.data.path = dir.file("missing.txt");
  expect_error(data, {"missing.txt"});
}

TEST(Checkpoint, ShapeMismatchNamesTheTensorAndBothShapes) {
  ScratchDir dir;
  JobSpec o = tiny_gpt(write_text(dir));
  o.run.steps = 1;
  o.checkpoint.save = dir.file("ckpt");
  std::ostringstream log;
  train(o, log);
  nn::GptConfig wider = o.model.gpt;
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
  JobSpec o = tiny_gpt(write_text(dir));
  o.run.steps = 1;
  o.checkpoint.save = dir.file("ckpt");
  std::ostringstream log;
  train(o, log);
  std::string model = dir.file("ckpt") + "/model.safetensors";
  std::filesystem::resize_file(model, std::filesystem::file_size(model) / 2);
  JobSpec resume = o;
  resume.checkpoint.resume = dir.file("ckpt");
  resume.run.steps = 2;
  expect_error(resume, {"model.safetensors"});
}

}  // namespace
}  // namespace px
