// Failure detection in process (docs/fault_tolerance.md): a rank that
// dies or freezes (--inject-fault) makes every other rank fail within the
// timeout with an error naming the silent rank, the step, the instruction
// and the collective's sequence number; its flight record and the others'
// let `parallax doctor` name it and what the others wait for.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <sstream>

#include "runtime/fault/flight_report.h"
#include "runtime/launch/launch.h"
#include "testing/scratch_dir.h"
#include "testing/tiny_jobs.h"

namespace px {
namespace {

using testing::ScratchDir;

JobSpec faulty_job(const std::string& run_dir, const std::string& mode) {
  JobSpec o = testing::tiny_gpt(testing::shared_text());
  o.model.gpt.dropout = 0;
  o.launch.ranks = 4;
  o.fault.timeout_s = 2;
  // Past the detection bound the test allows (the timeout + 2 s): no wait
  // gives up by itself in time, only the watchdog's verdict ends the job.
  o.fault.wait_timeout_s = 8;
  o.fault.run_dir = run_dir;
  o.fault.inject_fault.rank = 2;
  o.fault.inject_fault.step = 3;
  o.fault.inject_fault.mode = mode;
  return o;
}

int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

class SilentRank : public ::testing::TestWithParam<std::string> {};

TEST_P(SilentRank, EveryOtherRankNamesItWithinTheTimeoutAndDoctorFindsIt) {
  ScratchDir dir;
  const JobSpec o = faulty_job(dir.file("run"), GetParam());
  std::ostringstream log;
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  try {
    train(o, log);
  } catch (const Error& e) {
    error = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(error.empty()) << "the job must fail";
  EXPECT_NE(error.find("rank 2 is silent"), std::string::npos) << error;
  EXPECT_NE(error.find("it was last at the start of step 3"), std::string::npos) << error;
  EXPECT_NE(error.find("step 3, instruction #"), std::string::npos) << error;
  EXPECT_NE(error.find("sequence"), std::string::npos) << error;
  // Two steps of a tiny model, then at most the timeout and the watchdog's period.
  EXPECT_LT(seconds, o.fault.timeout_s + 2) << "detection must not wait past the timeout";

  const std::vector<FlightDump> records = read_flight_records(dir.file("run"));
  ASSERT_EQ(records.size(), 4u);
  const FlightDiagnosis d = diagnose(records, now_ns());
  EXPECT_EQ(d.behind, 2) << d.report;
  EXPECT_NE(d.report.find("rank 2 fell behind: " + std::string(GetParam() == "kill" ? "killed" : "frozen")),
            std::string::npos)
      << d.report;
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(records[static_cast<size_t>(r)].phase, RankPhase::failed) << "rank " << r;
    EXPECT_NE(d.report.find(fmt::format("rank {} waits for allreduce", r)), std::string::npos) << d.report;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, SilentRank, ::testing::Values("kill", "hang"));

// Seen under MPICH: the frozen rank 1 was named by rank 2, and rank 0 (held
// up behind it) by rank 3. As many accusers each: the one heard of first is
// behind, not the lower rank.
TEST(Doctor, AmongSuspectsNamedAsOftenTheOneLastHeardFirstFellBehind) {
  std::vector<FlightDump> records(4);
  for (int r = 0; r < 4; ++r) {
    records[static_cast<size_t>(r)].rank = r;
    records[static_cast<size_t>(r)].world = 4;
    records[static_cast<size_t>(r)].step = 12;
    records[static_cast<size_t>(r)].heartbeat_ns = 9'000;
  }
  records[1].step = 11;
  records[1].heartbeat_ns = 6'000;
  records[2].suspect = 1, records[2].suspect_heard_ns = 6'000;
  records[3].suspect = 0, records[3].suspect_heard_ns = 8'500;
  const FlightDiagnosis d = diagnose(records, 10'000);
  EXPECT_EQ(d.behind, 1) << d.report;
  std::swap(records[2].suspect, records[3].suspect);  // the order of the accusers does not matter
  std::swap(records[2].suspect_heard_ns, records[3].suspect_heard_ns);
  EXPECT_EQ(diagnose(records, 10'000).behind, 1);
}

TEST(FlightRecorder, KeepsTheLastEventsInARingAndReadsBackFromItsFile) {
  ScratchDir dir;
  const std::string path = flight_path(dir.file("run"), 1);
  FlightRecorder recorder(path, 1, 2, 4);
  recorder.at(7, 12, "grad bucket 0");
  for (uint64_t i = 0; i < 6; ++i) {
    const uint64_t n = recorder.post(FlightKind::collective, "dp", i, 7, 12, "allreduce grad", 64 * i);
    if (i < 5) recorder.done(n);
  }
  recorder.beat();
  const std::optional<FlightDump> d = FlightRecorder::read_file(path);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->rank, 1);
  EXPECT_EQ(d->world, 2);
  EXPECT_EQ(d->heartbeat, 1u);
  EXPECT_EQ(d->step, 7);
  EXPECT_EQ(d->instr_name, "grad bucket 0");
  ASSERT_EQ(d->events.size(), 4u) << "a ring of 4 keeps the last 4";
  EXPECT_EQ(d->events.front().sequence, 2u);
  EXPECT_EQ(d->events.back().sequence, 5u);
  EXPECT_EQ(d->events.back().state, FlightState::posted);
  EXPECT_EQ(d->events[2].state, FlightState::done);
  EXPECT_FALSE(FlightRecorder::read_file(dir.file("run/flight/rank9")).has_value());
}

TEST(FlightRecorder, AFileThatIsNotARecordIsNamed) {
  ScratchDir dir;
  const std::string path = dir.file("rank0");
  testing::write_file(path, std::string(100000, 'x'));
  try {
    FlightRecorder::read_file(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a parallax flight record"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace px
