// A planner's deadline: the instant its budget (PlanRequest::budget_seconds)
// runs out. Every step that can take long (enumerating, probing, lowering
// a candidate, replaying it) asks it, so a search stops within a fraction
// of a second of the budget with what it has found so far.
#pragma once

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
  bool passed() const { return remaining() <= 0; }
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
