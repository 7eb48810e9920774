// The defaults a user gets without flags: the model's (apply_model_defaults)
// and liveness's (liveness_timeouts: every wait outlasts the watchdog).
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <string>

#include "core/error.h"
#include "runtime/fault/watchdog.h"
#include "runtime/launch/job_spec.h"

namespace px {
namespace {

JobSpec defaults_for(const std::string& model, int64_t batch) {
  JobSpec o;
  o.model.kind = model;
  o.optimizer.schedule.lr = std::numeric_limits<double>::quiet_NaN();
  o.optimizer.update.weight_decay = o.optimizer.schedule.min_ratio = o.optimizer.grad_clip = std::numeric_limits<double>::quiet_NaN();
  o.data.batch = batch;
  apply_model_defaults(o);
  return o;
}

TEST(TrainDefaults, SgdLearningRateScalesDownWithASmallBatch) {
  EXPECT_DOUBLE_EQ(defaults_for("mlp", 64).optimizer.schedule.lr, 0.05);
  EXPECT_DOUBLE_EQ(defaults_for("cnn", 32).optimizer.schedule.lr, 0.025);
  EXPECT_NEAR(defaults_for("mlp", 7).optimizer.schedule.lr, 0.05 * 7 / 64, 1e-12);
  EXPECT_DOUBLE_EQ(defaults_for("mlp", 256).optimizer.schedule.lr, 0.05);  // no scaling up without warmup
  EXPECT_DOUBLE_EQ(defaults_for("gpt", 4).optimizer.schedule.lr, 1e-3);    // AdamW's default is the batch's own
}

TEST(TrainDefaults, AnExplicitLearningRateIsKept) {
  JobSpec o = defaults_for("mlp", 64);
  o.optimizer.schedule.lr = 0.3;
  o.data.batch = 8;
  apply_model_defaults(o);
  EXPECT_DOUBLE_EQ(o.optimizer.schedule.lr, 0.3);
}

// The error liveness_timeouts gives for these flags ("" for none).
std::string liveness_error(double timeout_s, double wait_timeout_s) {
  JobSpec o;
  o.fault.timeout_s = timeout_s;
  o.fault.wait_timeout_s = wait_timeout_s;
  try {
    liveness_timeouts(o.fault);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Liveness, WaitsOutlastTheWatchdogsVerdictByDefault) {
  JobSpec o;
  o.fault.timeout_s = 2;
  const LivenessTimeouts t = liveness_timeouts(o.fault);
  EXPECT_EQ(t.heartbeat, std::chrono::milliseconds(2000)) << "--timeout drives the watchdog";
  EXPECT_EQ(t.wait, kWaitTimeoutPerTimeout * std::chrono::milliseconds(2000));
  EXPECT_GT(t.wait, Watchdog::latest_verdict(t.heartbeat));
  o.fault.wait_timeout_s = 30;
  EXPECT_EQ(liveness_timeouts(o.fault).wait, std::chrono::milliseconds(30000)) << "an explicit --wait-timeout is kept";
}

TEST(Liveness, AWaitTimeoutThatWouldRaceTheVerdictIsANamedError) {
  // --timeout 2: the watchdog looks every 0.2 s and names a silent rank by 2.4 s.
  EXPECT_EQ(Watchdog::latest_verdict(std::chrono::milliseconds(2000)), std::chrono::milliseconds(2400));
  const std::string equal = liveness_error(2, 2.4);
  EXPECT_NE(equal.find("--wait-timeout 2.4 s must be longer than 2.4 s"), std::string::npos) << equal;
  EXPECT_NE(equal.find("--timeout 2 s"), std::string::npos) << equal;
  const std::string shorter = liveness_error(2, 1);
  EXPECT_NE(shorter.find("--wait-timeout 1 s must be longer than 2.4 s"), std::string::npos) << shorter;
  EXPECT_EQ(liveness_error(2, 2.5), "");
  const std::string negative = liveness_error(2, -1);
  EXPECT_NE(negative.find("--wait-timeout -1 s"), std::string::npos) << negative;
  const std::string zero = liveness_error(0, 0);
  EXPECT_NE(zero.find("--timeout 0 s"), std::string::npos) << zero;
  const std::string huge = liveness_error(1e300, 0);
  EXPECT_NE(huge.find("at most"), std::string::npos) << huge;
  // 3 x 10 ms is within the watchdog's two 20 ms periods: the default is refused, by name.
  const std::string tiny = liveness_error(0.01, 0);
  EXPECT_NE(tiny.find("(the default, 3 x --timeout 0.01 s)"), std::string::npos) << tiny;
}

}  // namespace
}  // namespace px
