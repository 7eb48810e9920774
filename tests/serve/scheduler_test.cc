#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <set>
#include <vector>

#include "serve/scheduler.h"

namespace px::serve {
namespace {

std::unique_ptr<SequenceState> sequence(uint64_t id, int64_t prompt, int64_t max_tokens) {
  auto s = std::make_unique<SequenceState>();
  s->id = id;
  s->tokens.assign(static_cast<size_t>(prompt), 7);
  s->prompt = prompt;
  s->max_tokens = max_tokens;
  return s;
}

// Runs `schedule` as the engine would: each chunk computed, a token drawn
// where it samples; the finished leave. Returns how many finished.
int run(Scheduler& scheduler, const Schedule& schedule) {
  int finished = 0;
  for (const ScheduledChunk& c : schedule.chunks) {
    SequenceState* s = c.sequence;
    EXPECT_EQ(c.start, s->computed);
    s->computed += c.rows;
    if (!c.samples) continue;
    EXPECT_EQ(s->pending(), 0);
    s->tokens.push_back(1);
    if (s->generated() == s->max_tokens) {
      scheduler.remove(s);
      ++finished;
    }
  }
  return finished;
}

TEST(Scheduler, DecodesFirstThenChunksPrefillsWithinTheTokenBudget) {
  decode::BlockPool pool(64, 4);
  Scheduler scheduler({.max_batch_tokens = 8}, pool);
  auto a = sequence(0, 3, 10), b = sequence(1, 20, 10);
  scheduler.add(a.get());
  Schedule first = scheduler.next();  // a's prompt
  ASSERT_EQ(first.chunks.size(), 1u);
  EXPECT_EQ(first.chunks[0].rows, 3);
  EXPECT_TRUE(first.chunks[0].samples);
  run(scheduler, first);
  scheduler.add(b.get());
  Schedule second = scheduler.next();  // a's decode, then 7 of b's 20
  ASSERT_EQ(second.chunks.size(), 2u);
  EXPECT_EQ(second.chunks[0].sequence, a.get());
  EXPECT_EQ(second.chunks[0].rows, 1);
  EXPECT_EQ(second.chunks[1].rows, 7);
  EXPECT_FALSE(second.chunks[1].samples);
  run(scheduler, second);
  Schedule third = scheduler.next();  // a's decode, 7 more of b
  EXPECT_EQ(third.rows(), 8);
  run(scheduler, third);
  Schedule fourth = scheduler.next();  // a's decode and b's last 6, which samples
  ASSERT_EQ(fourth.chunks.size(), 2u);
  EXPECT_EQ(fourth.chunks[1].rows, 6);
  EXPECT_TRUE(fourth.chunks[1].samples);
}

TEST(Scheduler, AdmitsInArrivalOrderWhileBlocksLast) {
  decode::BlockPool pool(5, 4);  // 20 slots
  Scheduler scheduler({.max_batch_tokens = 64}, pool);
  auto a = sequence(0, 8, 4), b = sequence(1, 12, 4), c = sequence(2, 2, 4);
  scheduler.add(a.get());
  scheduler.add(b.get());
  scheduler.add(c.get());
  const Schedule s = scheduler.next();  // a (2 blocks) joins; b needs 3 of the 3 left: joins; c waits
  EXPECT_EQ(s.chunks.size(), 2u);
  EXPECT_EQ(scheduler.waiting(), 1);
  EXPECT_EQ(pool.free_blocks(), 0);
}

TEST(Scheduler, PreemptsTheLatestArrivalWhenNoBlockIsFree) {
  decode::BlockPool pool(4, 2);  // 8 slots
  Scheduler scheduler({.max_batch_tokens = 64}, pool);
  auto a = sequence(0, 4, 8), b = sequence(1, 4, 8);
  scheduler.add(a.get());
  scheduler.add(b.get());
  run(scheduler, scheduler.next());  // both prefill: 4 blocks, each has drawn a token (5 tokens)
  const Schedule s = scheduler.next();  // a's decode needs a 3rd block: b goes
  ASSERT_EQ(s.preempted.size(), 1u);
  EXPECT_EQ(s.preempted[0], b.get());
  EXPECT_EQ(b->computed, 0);
  EXPECT_EQ(b->preemptions, 1);
  EXPECT_EQ(scheduler.waiting_queue().front(), b.get());
  ASSERT_EQ(s.chunks.size(), 1u);
  EXPECT_EQ(s.chunks[0].sequence, a.get());
}

TEST(Scheduler, RequestBatchingAdmitsOnlyWhenNoneRuns) {
  decode::BlockPool pool(64, 4);
  Scheduler scheduler({.max_batch_tokens = 64, .batching = Batching::request}, pool);
  auto a = sequence(0, 3, 1), b = sequence(1, 3, 3), c = sequence(2, 3, 1);
  scheduler.add(a.get());
  scheduler.add(b.get());
  run(scheduler, scheduler.next());  // a and b prefill; a finishes
  scheduler.add(c.get());
  EXPECT_EQ(scheduler.next().chunks.size(), 1u);  // b alone: c waits for the batch to end
  EXPECT_EQ(scheduler.waiting(), 1);
}

TEST(Scheduler, RandomWorkloadKeepsEveryInvariantAndFinishesAll) {
  for (const bool reserve : {false, true}) {
    decode::BlockPool pool(24, 4);
    Scheduler scheduler({.max_batch_tokens = 16, .max_running = 6, .reserve_max_tokens = reserve}, pool);
    std::mt19937_64 rng(9);
    std::vector<std::unique_ptr<SequenceState>> all;
    int finished = 0, preemptions = 0;
    for (int iteration = 0; iteration < 5000 && finished < 200; ++iteration) {
      if (all.size() < 200 && rng() % 3 == 0) {
        all.push_back(sequence(all.size(), 1 + static_cast<int64_t>(rng() % 40), 1 + static_cast<int64_t>(rng() % 40)));
        scheduler.add(all.back().get());
      }
      const Schedule s = scheduler.next();
      preemptions += static_cast<int>(s.preempted.size());
      EXPECT_LE(s.rows(), 16);
      std::set<int32_t> held;
      int64_t count = 0;
      for (const auto& q : all)
        for (int32_t b : q->blocks) {
          EXPECT_TRUE(held.insert(b).second);
          ++count;
        }
      ASSERT_EQ(count, pool.used_blocks());
      finished += run(scheduler, s);
    }
    EXPECT_EQ(finished, 200) << "reserve " << reserve;
    EXPECT_EQ(pool.used_blocks(), 0);
    if (!reserve) {
      EXPECT_GT(preemptions, 0);  // the pool is small enough that paging must preempt
    } else {
      EXPECT_EQ(preemptions, 0);  // a reservation never runs out
    }
  }
}

}  // namespace
}  // namespace px::serve
