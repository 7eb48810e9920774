// Bad options must fail training with a named error: runs `options` and
// expects a px::Error whose message contains `fragment`.
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "core/error.h"
#include "runtime/launch/launch.h"

namespace px::testing {

inline void expect_train_error(const JobSpec& options, const std::string& fragment) {
  std::ostringstream log;
  try {
    train(options, log);
    ADD_FAILURE() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

}  // namespace px::testing
