// The memory guard (runtime/fault/memory_guard.h): an impossible configuration
// stops with a named error before anything is allocated, and the estimate
// it checks is the measured peak's within 10%.
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>

#include "nn/model.h"
#include "parallel/lower.h"
#include "parallel/lower/liveness.h"
#include "plan/job_strategy.h"
#include "plan/memory.h"
#include "runtime/fault/memory_guard.h"
#include "runtime/launch/launch.h"
#include "testing/tiny_jobs.h"

namespace px {
namespace {

std::string error_of(const JobSpec& o) {
  std::ostringstream log;
  try {
    train(o, log);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

TEST(MemoryGuard, AHundredThousandLayersAreRefusedWithinASecond) {
  JobSpec o = testing::tiny_gpt(testing::shared_text());
  o.model.gpt = {};  // gpt-mini's shape
  o.model.gpt.n_layer = 100000;
  const auto start = std::chrono::steady_clock::now();
  const std::string error = error_of(o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(error.find("GiB on this machine for its"), std::string::npos) << error;
  EXPECT_NE(error.find("GiB available"), std::string::npos) << error;
  EXPECT_NE(error.find("try --tp, --pp, --zero or --recompute"), std::string::npos) << error;
  EXPECT_LT(seconds, 1.0);
}

TEST(MemoryGuard, ActivationsThatCannotFitAreRefusedBeforeAllocating) {
  // Small parameters, but one attention matrix alone is batch x heads x T x T floats.
  JobSpec o = testing::tiny_gpt(testing::shared_text());
  o.model.gpt = {};
  o.model.gpt.block = 1024;
  o.data.batch = 4096;
  const std::string error = error_of(o);
  EXPECT_NE(error.find("GiB per rank at its peak (1 rank on this machine"), std::string::npos) << error;
  EXPECT_NE(error.find("try --tp"), std::string::npos) << error;
}

TEST(MemoryGuard, TheEstimateIsTheMeasuredPeakWithinTenPercent) {
  JobSpec o = testing::tiny_gpt(testing::shared_text());
  o.model.gpt = {.vocab = 256, .block = 64, .n_layer = 2, .n_head = 2, .n_embd = 64, .dropout = 0};
  o.data.batch = 8;
  o.run.steps = 2;
  std::ostringstream log;
  const JobResult result = train(o, log);
  // The same Program the run lowered (one rank), estimated as the guard does.
  std::unique_ptr<Task> task = make_task(o.model, o.data, o.run.seed);
  const nn::Model model = task->build(o.data.batch, true);
  const parallel::Program program =
      parallel::lower({.forward = &model.graph, .loss = model.loss}, plan::strategy_for(o.strategy, model, 1), 0);
  const double estimate = plan::program_memory(program, parallel::liveness(program), 2).peak_bytes;
  const double measured = static_cast<double>(result.run.peak_tensor_bytes);
  EXPECT_NEAR(estimate, measured, 0.1 * measured) << "estimate " << estimate << ", measured " << measured;
}

}  // namespace
}  // namespace px
