// The generic equivalence harness every parallel strategy is judged by: the
// same job trained on one rank and under the strategy (any rank count, any
// sync options) must give the same per-step losses on the same global
// batch, within a relative tolerance. Later strategies (tensor, pipeline,
// hybrids) reuse it by describing their job as TrainOptions.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/trainer.h"

namespace px::testing {

inline std::vector<double> train_losses(const TrainOptions& options) {
  std::ostringstream log;
  return train(options, log).losses;
}

// Single-rank losses, trained once per key in a test binary.
inline const std::vector<double>& reference_losses(const std::string& key, const TrainOptions& options) {
  static std::map<std::string, std::vector<double>> cache;
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, train_losses(options)).first;
  return it->second;
}

// Compares per-step losses of `reference` and `candidate` step by step;
// `what` names the candidate in failure messages.
inline void expect_same_losses(const std::vector<double>& reference, const std::vector<double>& candidate,
                               double relative_tolerance, const std::string& what) {
  ASSERT_EQ(reference.size(), candidate.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    ASSERT_TRUE(std::isfinite(candidate[i])) << what << " step " << i + 1;
    double rel = std::abs(candidate[i] - reference[i]) / std::max(std::abs(reference[i]), 1e-12);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, relative_tolerance) << what << " step " << i + 1 << ": " << candidate[i] << " vs single rank "
                                       << reference[i];
  }
  ::testing::Test::RecordProperty("worst_relative_difference", std::to_string(worst));
}

}  // namespace px::testing
