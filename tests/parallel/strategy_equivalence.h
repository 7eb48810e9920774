// The generic equivalence harness every parallel strategy is judged by: the
// same job trained on one rank and under the strategy (any rank count, any
// sync options) must give the same per-step losses on the same global
// batch, within a relative tolerance. Later strategies (tensor, pipeline,
// hybrids) reuse it by describing their job as JobSpec.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/launch/launch.h"
#include "testing/scratch_dir.h"

namespace px::testing {

// Every strategy's equivalence runs: this many steps, per-step losses within
// this relative tolerance of one rank's.
constexpr int kEquivalenceSteps = 50;
constexpr double kEquivalenceTolerance = 1e-5;

inline std::vector<double> train_losses(const JobSpec& options) {
  std::ostringstream log;
  return train(options, log).run.losses;
}

// Single-rank losses, trained once per key in a test binary.
inline const std::vector<double>& reference_losses(const std::string& key, const JobSpec& options) {
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
  ::testing::Test::RecordProperty("worst_relative_difference", fmt::format("{:.3g}", worst));
}

// One link of a resume chain: a job under some strategy, its steps the
// whole chain's.
struct ResumeLink {
  std::string name;
  JobSpec options;
};

// Each link trains `segment` steps from the previous link's checkpoint
// (the first from the start) and saves; its losses must match the same
// steps of an uninterrupted run of its own job.
inline void expect_resumed_segments_match(const std::vector<ResumeLink>& chain, int64_t segment,
                                          double relative_tolerance) {
  ScratchDir dir;
  std::string checkpoint;
  for (size_t i = 0; i < chain.size(); ++i) {
    JobSpec o = chain[i].options;
    o.checkpoint.resume = checkpoint;
    o.run.stop_after = segment * static_cast<int64_t>(i + 1);
    checkpoint = dir.file("ckpt" + std::to_string(i));
    o.checkpoint.save = checkpoint;
    const std::vector<double> resumed = train_losses(o);
    ASSERT_EQ(resumed.size(), static_cast<size_t>(segment)) << chain[i].name;
    JobSpec whole = chain[i].options;
    whole.run.stop_after = o.run.stop_after;
    const std::vector<double> uninterrupted = train_losses(whole);
    const std::vector<double> tail(uninterrupted.end() - segment, uninterrupted.end());
    expect_same_losses(tail, resumed, relative_tolerance,
                       "resumed under " + chain[i].name + " from " + (i == 0 ? "the start" : chain[i - 1].name));
  }
}

}  // namespace px::testing
