// `parallax bench serve` end to end, in this process: a tiny random GPT
// saved as a checkpoint (nothing trained), served by serve() on a free
// port (serve/serve_thread.h), loaded by the load generator
// (serve/load_client.h) with a Poisson plan.
#include <gtest/gtest.h>

#include <csignal>
#include <thread>

#include <httplib.h>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/tasks/model_json.h"
#include "serve/load_client.h"
#include "serve/serve_thread.h"
#include "testing/gpt_reference.h"
#include "testing/scratch_dir.h"

namespace px::serve {
namespace {

const nn::GptConfig kBenchConfig{.vocab = 256, .block = 64, .n_layer = 2, .n_head = 2, .n_embd = 16};

// The checkpoint `parallax train --save` would write for kBenchConfig,
// with random weights.
void save_random_gpt(const std::string& dir) {
  nn::ModelConfig model{.kind = "gpt", .gpt = kBenchConfig};
  const ParamStore weights = testing::scaled_gpt_weights(kBenchConfig, 11);
  save_checkpoint(dir, nullptr, {.model = weights.named(), .state = {.config = model_json(model, DataOptions{})}});
}

// One server for the suite: starting and draining one takes about a second.
class BenchServe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::signal(SIGPIPE, SIG_IGN);
    dir_ = new testing::ScratchDir;
    save_random_gpt(dir_->file("ckpt"));
    log_ = new std::ostringstream;
    ServeOptions options{.checkpoint = dir_->file("ckpt"), .port = 0, .threads = 1, .block_tokens = 4};
    options.scheduler.max_running = 4;
    server_ = new ServeThread(options, *log_);
  }
  static void TearDownTestSuite() {
    server_->stop();
    delete server_;
    delete log_;
    delete dir_;
  }
  static testing::ScratchDir* dir_;
  static std::ostringstream* log_;
  static ServeThread* server_;
};
testing::ScratchDir* BenchServe::dir_ = nullptr;
std::ostringstream* BenchServe::log_ = nullptr;
ServeThread* BenchServe::server_ = nullptr;

TEST_F(BenchServe, SixPoissonRequestsSucceedWithTheirTokenCountsAndSaneLatencies) {
  const ServerInfo info = query_server(server_->url());
  EXPECT_EQ(info.model, "parallax-gpt");
  EXPECT_EQ(info.context, kBenchConfig.block);
  const Workload workload{.requests = 6, .rate = 40, .seed = 5, .prompt_bytes = {8, 40}, .output_tokens = {4, 20}};
  const std::vector<PlannedRequest> plan =
      plan_requests(workload, "the quick brown fox jumps over the lazy dog; naïve café\n", info.context);
  const LoadRun run = run_load(plan, info.model, {.url = server_->url(), .max_concurrency = 4, .metrics_interval = 0.02});
  ASSERT_EQ(run.records.size(), 6u);
  for (size_t i = 0; i < run.records.size(); ++i) {
    const RequestRecord& r = run.records[i];
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.output_tokens, plan[i].max_tokens) << i;   // usage.completion_tokens
    EXPECT_EQ(r.prompt_tokens, static_cast<int64_t>(plan[i].prompt.size())) << i;
    EXPECT_EQ(static_cast<int64_t>(r.token_times.size()), r.output_tokens) << i;  // one chunk per token
    EXPECT_GT(r.ttft(), 0);
    EXPECT_LE(r.ttft(), r.e2e);
    for (size_t k = 1; k < r.token_times.size(); ++k) EXPECT_LE(r.token_times[k - 1], r.token_times[k]);
    EXPECT_GE(r.sent_at + 1e-3, plan[i].send_at);  // never before its arrival time
  }
  const LoadSummary s = summarize(run.records, run.duration, parse_slo("ttft:60000"));
  EXPECT_EQ(s.succeeded, 6);
  EXPECT_EQ(s.failed, 0);
  int64_t asked = 0;
  for (const PlannedRequest& p : plan) asked += p.max_tokens;
  EXPECT_EQ(s.output_tokens, asked);
  for (const Distribution& d : {s.ttft, s.tpot, s.itl, s.e2e}) {
    EXPECT_GT(d.count, 0);
    EXPECT_GE(d.p50, 0);
    EXPECT_LE(d.p50, d.p90);
    EXPECT_LE(d.p90, d.p99);
  }
  EXPECT_LE(s.ttft.p99, s.e2e.p99);
  EXPECT_GT(run.duration, plan.back().send_at);
  EXPECT_EQ(s.met_slo, 6);
  EXPECT_TRUE(run.peaks.polled);  // (a poll may fall between this tiny model's requests: no lower bound)
  EXPECT_LE(run.peaks.running, 4);  // --max-running
  EXPECT_GT(run.peaks.kv_blocks_total, 0);
}

TEST_F(BenchServe, AFailedRequestIsRecordedWithTheServersError) {
  const std::vector<PlannedRequest> plan{{.prompt = "fits", .max_tokens = 3},
                                         {.prompt = "too long an output", .max_tokens = 1000}};
  const LoadRun run = run_load(plan, "parallax-gpt", {.url = server_->url(), .metrics_interval = 0});
  ASSERT_EQ(run.records.size(), 2u);
  EXPECT_TRUE(run.records[0].ok()) << run.records[0].error;
  EXPECT_FALSE(run.records[1].ok());
  EXPECT_NE(run.records[1].error.find("HTTP 400"), std::string::npos) << run.records[1].error;
  EXPECT_NE(run.records[1].error.find("max_tokens"), std::string::npos) << run.records[1].error;
  const LoadSummary s = summarize(run.records, run.duration, {});
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.first_error, run.records[1].error);
  EXPECT_FALSE(run.peaks.polled);
}

TEST(BenchServeErrors, NoServerAndABadUrlAreNamed) {
  try {
    query_server("http://127.0.0.1:1");
    ADD_FAILURE() << "a server answered on port 1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no server answers at http://127.0.0.1:1"), std::string::npos) << e.what();
  }
  try {
    query_server("https://example.com");
    ADD_FAILURE() << "took https";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--url 'https://example.com' is not http://HOST:PORT"), std::string::npos)
        << e.what();
  }
  testing::ScratchDir dir;
  std::ostringstream log;
  EXPECT_THROW(ServeThread({.checkpoint = dir.file("none"), .port = 0}, log), Error);
}

// Asking for the rest of the context, each client leaves once its drawn
// output arrived: the records count those tokens, and the server frees
// every sequence it was left with.
TEST_F(BenchServe, ClientsAskingTheWholeContextLeaveAtTheirOutputLength) {
  const ServerInfo info = query_server(server_->url());
  const Workload workload{.requests = 4, .seed = 9, .prompt_bytes = {8, 20}, .output_tokens = {3, 6},
                          .ask_whole_context = true};
  const std::vector<PlannedRequest> plan = plan_requests(workload, "the quick brown fox jumps over", info.context);
  const LoadRun run = run_load(plan, info.model, {.url = server_->url(), .max_concurrency = 4, .metrics_interval = 0});
  for (size_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(plan[i].max_tokens, info.context - static_cast<int64_t>(plan[i].prompt.size()));
    ASSERT_TRUE(run.records[i].ok()) << run.records[i].error;
    EXPECT_EQ(run.records[i].output_tokens, plan[i].output_tokens) << i;
  }
  std::string metrics;
  for (int wait = 0; wait < 100; ++wait) {  // the server sees each client go within its next poll
    httplib::Client client(server_->url());
    if (const httplib::Result got = client.Get("/metrics")) metrics = got->body;
    if (prometheus_value(metrics, "parallax_kv_blocks_used") == 0.0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(prometheus_value(metrics, "parallax_kv_blocks_used"), 0.0) << metrics;
}

}  // namespace
}  // namespace px::serve
