// A planner's deadline: the instant its budget (PlanRequest::budget_seconds)
// runs out. Every step that can take long (enumerating, probing, lowering
// a candidate, replaying it) asks it, so a search stops with what it has
// found so far, within the budget: it keeps as a reserve the longest
// stretch between two questions so far (at most kMostReserved of the
// budget), since the step after the last question (and the ranking after
// the search) must end in time too. The cap: a stretch a search bounds
// itself by elapsed() (an MCMC chain walks to its own end) is no step.
#pragma once

#include <algorithm>
#include <chrono>
#include <limits>
#include <stdexcept>

namespace px::plan {

struct Deadline {
  using Clock = std::chrono::steady_clock;
  Clock::time_point start = Clock::now();
  double seconds = std::numeric_limits<double>::infinity();  // the budget; infinite: never passes

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start).count(); }
  double remaining() const { return seconds - elapsed(); }
  static constexpr double kMostReserved = 0.1;
  // True once what is left of the budget is no more than the reserve.
  bool passed() const {
    const double now = elapsed();
    if (last_asked_ >= 0) longest_gap_ = std::max(longest_gap_, now - last_asked_);
    last_asked_ = now;  // the first question: what came before (building the model) is no step of the search
    return seconds - now <= std::min(longest_gap_, kMostReserved * seconds);
  }

  // Bookkeeping of the questions, not set by callers (a search asks from
  // one thread); public only so a Deadline stays an aggregate.
  mutable double last_asked_ = -1;
  mutable double longest_gap_ = 0;

  // Throws DeadlinePassed once the budget is spent: for steps deep inside
  // one candidate (a replay's event loop, a lowering stage by stage) that
  // cannot return a partial result, only give theirs up.
  void check() const;
};

// A step given up at the deadline. Not a px::Error: a candidate cut short
// is not one that "does not lower", and the searches catch it apart.
class DeadlinePassed : public std::runtime_error {
 public:
  DeadlinePassed() : std::runtime_error("the planner's budget ran out") {}
};

inline void Deadline::check() const {
  if (passed()) throw DeadlinePassed();
}

}  // namespace px::plan
