// The model defaults a user gets without flags (apply_model_defaults).
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "runtime/train/train_options.h"

namespace px {
namespace {

TrainOptions defaults_for(const std::string& model, int64_t batch) {
  TrainOptions o;
  o.model = model;
  o.schedule.lr = std::numeric_limits<double>::quiet_NaN();
  o.optimizer.weight_decay = o.schedule.min_ratio = o.grad_clip = std::numeric_limits<double>::quiet_NaN();
  o.batch = batch;
  apply_model_defaults(o);
  return o;
}

TEST(TrainDefaults, SgdLearningRateScalesDownWithASmallBatch) {
  EXPECT_DOUBLE_EQ(defaults_for("mlp", 64).schedule.lr, 0.05);
  EXPECT_DOUBLE_EQ(defaults_for("cnn", 32).schedule.lr, 0.025);
  EXPECT_NEAR(defaults_for("mlp", 7).schedule.lr, 0.05 * 7 / 64, 1e-12);
  EXPECT_DOUBLE_EQ(defaults_for("mlp", 256).schedule.lr, 0.05);  // no scaling up without warmup
  EXPECT_DOUBLE_EQ(defaults_for("gpt", 4).schedule.lr, 1e-3);    // AdamW's default is the batch's own
}

TEST(TrainDefaults, AnExplicitLearningRateIsKept) {
  TrainOptions o = defaults_for("mlp", 64);
  o.schedule.lr = 0.3;
  o.batch = 8;
  apply_model_defaults(o);
  EXPECT_DOUBLE_EQ(o.schedule.lr, 0.3);
}

}  // namespace
}  // namespace px
