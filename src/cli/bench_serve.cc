// `parallax bench serve`: requests at Poisson arrival times (or all at
// once, or closed-loop), each streamed and timed per token, then
// benchmark_serving's table: throughput, TTFT, TPOT, inter-token and
// end-to-end latency, goodput under --slo, and the server's peaks from
// /metrics. --out writes the same and every request as JSON.
#include "cli/bench_serve.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/train_flags.h"
#include "core/error.h"
#include "kernels/cpu_features.h"
#include "serve/load_client.h"
#include "serve/serve_thread.h"

namespace px::cli {
namespace {

using nlohmann::json;

constexpr const char* kFortunes = "/usr/share/games/fortunes";

struct BenchServeFlags {
  std::string url;
  serve::ServeOptions serve;  // with --checkpoint
  std::string precision = "fp32", kv_memory, scheduler = "iteration";
  std::vector<CLI::Option*> server_flags;  // refused with --url: that server is configured already
  serve::Workload workload;
  std::string rate = "0", prompt_bytes = "16:200", output_tokens = "8:200", slo;
  serve::ClientOptions client;
  int64_t context = 0;
  std::vector<std::string> data;
  std::string out;
};

// The Debian fortunes (every text file of the directory), else ./README.md.
std::vector<std::string> default_data_files() {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(kFortunes, ec)) {
    const std::string name = entry.path().filename().string();
    const bool index_or_alias = name.ends_with(".dat") || name.ends_with(".u8");  // strfile's index, a symlink
    if (entry.is_regular_file() && !entry.is_symlink() && !index_or_alias) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  if (files.empty() && std::ifstream("README.md")) files.push_back("README.md");
  if (files.empty())
    fail("bench serve: no prompt text: {} has no fortunes (apt-get install fortunes) and ./README.md is not "
         "readable; give --data FILE...",
         kFortunes);
  return files;
}

double parse_rate(const std::string& text) {
  if (text == "inf") return INFINITY;
  char* end = nullptr;
  const double rate = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(rate >= 0))
    fail("--rate '{}' is not a rate: expected requests per second >= 0, or inf (0 and inf: all at once)", text);
  return rate;
}

serve::ServeOptions server_options(const BenchServeFlags& f) {
  serve::ServeOptions o = f.serve;
  o.host = "127.0.0.1";
  o.port = 0;
  // A connection per in-flight request and one for /metrics: the client
  // measures the scheduler's queue, not the HTTP thread pool's.
  o.http_threads = std::max(o.http_threads, f.client.max_concurrency + 2);
  o.precision = parse_precision(f.precision);
  if (o.precision == Precision::bf16) kernels::require_avx512_bf16("--precision bf16");
  if (!f.kv_memory.empty()) o.kv_memory = serve::parse_bytes(f.kv_memory, "--kv-memory");
  o.scheduler.batching = serve::batching_from_name(f.scheduler);
  return o;
}

// One line every 10 s, or a line redrawn in place on a terminal.
void show_progress(const serve::LoadProgress& p) {
  static const bool terminal = isatty(STDERR_FILENO) != 0;
  static double last = -10;
  const std::string line = fmt::format("bench serve: {}/{} done ({} failed), {} in flight, {:.0f} s", p.done, p.total,
                                       p.failed, p.in_flight, p.seconds);
  if (terminal) {
    fmt::print(stderr, "\r{}\033[K", line);
  } else if (p.seconds - last >= 10) {
    fmt::print(stderr, "{}\n", line);
    last = p.seconds;
  }
}

void print_row(const std::string& name, const std::string& value) { fmt::print("{:<40} {}\n", name, value); }
void print_heading(const std::string& title) { fmt::print("{:-^50}\n", title); }

void print_distribution(const std::string& name, const std::string& key, const serve::Distribution& d) {
  print_heading(name);
  print_row(fmt::format("Mean {} (ms):", key), fmt::format("{:.2f}", d.mean * 1e3));
  print_row(fmt::format("Median {} (ms):", key), fmt::format("{:.2f}", d.p50 * 1e3));
  print_row(fmt::format("P90 {} (ms):", key), fmt::format("{:.2f}", d.p90 * 1e3));
  print_row(fmt::format("P99 {} (ms):", key), fmt::format("{:.2f}", d.p99 * 1e3));
}

std::string slo_text(const serve::Slo& slo) {
  std::vector<std::string> parts;
  if (slo.ttft) parts.push_back(fmt::format("TTFT <= {:g} ms", *slo.ttft * 1e3));
  if (slo.tpot) parts.push_back(fmt::format("TPOT <= {:g} ms", *slo.tpot * 1e3));
  if (slo.e2e) parts.push_back(fmt::format("E2E <= {:g} ms", *slo.e2e * 1e3));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// The run's summary and, when the workload has long prompts, theirs and
// the other requests' apart.
struct RunSummaries {
  serve::LoadSummary all;
  std::optional<serve::LoadSummary> long_prompts, other_prompts;
};

RunSummaries summaries_of(const serve::LoadRun& run, const serve::Slo& slo, bool long_prompts) {
  RunSummaries out{.all = serve::summarize(run.records, run.duration, slo)};
  if (!long_prompts) return out;
  std::vector<serve::RequestRecord> longs, others;
  for (const serve::RequestRecord& r : run.records) (r.long_prompt ? longs : others).push_back(r);
  out.long_prompts = serve::summarize(longs, run.duration, slo);
  out.other_prompts = serve::summarize(others, run.duration, slo);
  return out;
}

void print_summary(const RunSummaries& summaries, const serve::Slo& slo, const serve::ServerPeaks& peaks) {
  const serve::LoadSummary& s = summaries.all;
  fmt::print("{:=^50}\n", " Serving Benchmark Result ");
  print_row("Successful requests:", fmt::format("{}", s.succeeded));
  print_row("Failed requests:", fmt::format("{}", s.failed));
  if (s.failed) print_row("First error:", s.first_error);
  print_row("Benchmark duration (s):", fmt::format("{:.2f}", s.duration));
  print_row("Total input tokens:", fmt::format("{}", s.input_tokens));
  print_row("Total generated tokens:", fmt::format("{}", s.output_tokens));
  print_row("Request throughput (req/s):", fmt::format("{:.2f}", s.request_throughput));
  print_row("Output token throughput (tok/s):", fmt::format("{:.2f}", s.output_throughput));
  if (!slo.empty()) {
    print_row("Request goodput (req/s):", fmt::format("{:.2f}", s.goodput));
    print_row("Requests meeting the SLO (%):", fmt::format("{:.1f}  ({})", s.slo_fraction * 100, slo_text(slo)));
  }
  print_distribution("Time to First Token", "TTFT", s.ttft);
  print_distribution("Time per Output Token (excl. 1st token)", "TPOT", s.tpot);
  print_distribution("Inter-token Latency", "ITL", s.itl);
  print_distribution("End-to-end Latency", "E2E", s.e2e);
  if (summaries.long_prompts) {
    const serve::LoadSummary &l = *summaries.long_prompts, &o = *summaries.other_prompts;
    print_heading(fmt::format("Long prompts ({} requests)", l.succeeded + l.failed));
    print_row("Mean TTFT (ms):", fmt::format("{:.2f}", l.ttft.mean * 1e3));
    print_row("P99 TTFT (ms):", fmt::format("{:.2f}", l.ttft.p99 * 1e3));
    print_heading(fmt::format("Other requests ({})", o.succeeded + o.failed));
    print_row("P99 TTFT (ms):", fmt::format("{:.2f}", o.ttft.p99 * 1e3));
    print_row("P99 ITL (ms):", fmt::format("{:.2f}", o.itl.p99 * 1e3));
  }
  if (peaks.polled) {
    print_heading("Server (/metrics, polled)");
    print_row("Peak running sequences:", fmt::format("{}", peaks.running));
    print_row("Peak waiting sequences:", fmt::format("{}", peaks.waiting));
    print_row("Peak KV blocks used:", fmt::format("{} of {}", peaks.kv_blocks_used, peaks.kv_blocks_total));
    print_row("Preemptions:", fmt::format("{}", peaks.preemptions));
  }
  fmt::print("{:=^50}\n", "");
}

json report_json(const BenchServeFlags& f, const serve::ServerInfo& server, const serve::LoadRun& run,
                 const RunSummaries& summaries, const serve::Slo& slo) {
  json report = {{"url", f.client.url},
                 {"model", server.model},
                 {"context", server.context},
                 {"workload", serve::to_json(f.workload)},
                 {"max_concurrency", f.client.max_concurrency},
                 {"summary", serve::to_json(summaries.all, slo)}};
  if (!f.serve.checkpoint.empty())
    report["server"] = {{"checkpoint", f.serve.checkpoint}, {"scheduler", f.scheduler},
                        {"reserve_max_tokens", f.serve.scheduler.reserve_max_tokens},
                        {"max_running", f.serve.scheduler.max_running},
                        {"max_batch_tokens", f.serve.scheduler.max_batch_tokens}, {"kv_memory", f.kv_memory},
                        {"block_tokens", f.serve.block_tokens}, {"threads", f.serve.threads}, {"tp", f.serve.tp},
                        {"precision", f.precision}};
  if (summaries.long_prompts) {
    report["long_prompts"] = serve::to_json(*summaries.long_prompts, slo);
    report["other_prompts"] = serve::to_json(*summaries.other_prompts, slo);
  }
  if (run.peaks.polled)
    report["server_peaks"] = {{"running", run.peaks.running}, {"waiting", run.peaks.waiting},
                              {"kv_blocks_used", run.peaks.kv_blocks_used},
                              {"kv_blocks_total", run.peaks.kv_blocks_total}, {"preemptions", run.peaks.preemptions}};
  json requests = json::array();
  for (const serve::RequestRecord& r : run.records) requests.push_back(serve::to_json(r));
  report["requests"] = std::move(requests);
  return report;
}

// The load against `url`, reported.
void bench(BenchServeFlags& f, const serve::Slo& slo) {
  f.client.url = f.url;
  const serve::ServerInfo server = serve::query_server(f.url);
  const int64_t context = f.context > 0 ? f.context : server.context;
  if (context < 2)
    fail("bench serve: the server at {} does not say its context (GET /v1/models has no parallax.context); give "
         "--context N",
         f.url);
  const std::vector<std::string> files = f.data.empty() ? default_data_files() : f.data;
  const std::vector<serve::PlannedRequest> plan = serve::plan_requests(f.workload, serve::read_corpus(files), context);
  const auto cut = std::count_if(plan.begin(), plan.end(),
                                 [&](const auto& p) { return !p.long_prompt && p.output_tokens < f.workload.output_tokens.low; });
  const bool at_once = f.workload.rate == 0 || std::isinf(f.workload.rate);
  fmt::print("bench serve: {} requests to {} ({}, context {}), {}, at most {} in flight, seed {}\n", plan.size(), f.url,
             server.model, context, at_once ? "all at once" : fmt::format("Poisson arrivals at {:g} req/s", f.workload.rate),
             f.client.max_concurrency, f.workload.seed);
  fmt::print("bench serve: prompts {}:{} bytes from {} file(s), outputs {}:{} tokens ({} cut below {} to fit the context)\n",
             f.workload.prompt_bytes.low, f.workload.prompt_bytes.high, files.size(), f.workload.output_tokens.low,
             f.workload.output_tokens.high, cut, f.workload.output_tokens.low);
  if (f.workload.ask_whole_context)
    fmt::print("bench serve: each request asks for the rest of the context and ends its stream at its output length\n");
  std::fflush(stdout);
  const serve::LoadRun run = serve::run_load(plan, server.model, f.client, show_progress);
  if (isatty(STDERR_FILENO)) fmt::print(stderr, "\n");
  const RunSummaries summaries = summaries_of(run, slo, f.workload.long_prompt_fraction > 0);
  print_summary(summaries, slo, run.peaks);
  if (!f.out.empty()) {
    std::ofstream out(f.out);
    out << report_json(f, server, run, summaries, slo).dump(1, ' ', false, json::error_handler_t::replace) << "\n";
    if (!out) fail("bench serve: cannot write --out file '{}'", f.out);
  }
  if (summaries.all.succeeded == 0) fail("bench serve: every request failed; the first: {}", summaries.all.first_error);
}

}  // namespace

void add_bench_serve_command(CLI::App& bench_app) {
  auto f = std::make_shared<BenchServeFlags>();
  CLI::App* cmd = bench_app.add_subcommand(
      "serve", "Load-test an OpenAI-compatible server: Poisson arrivals, streamed requests, TTFT/TPOT/ITL percentiles");
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  CLI::Option* url = cmd->add_option("--url", f->url, "a running server, http://HOST:PORT");
  CLI::Option* checkpoint =
      cmd->add_option("--checkpoint", f->serve.checkpoint, "serve this GPT checkpoint in this process on a free port");
  url->excludes(checkpoint);
  auto server = [&](CLI::Option* option) { f->server_flags.push_back(option->group("server (with --checkpoint)")); };
  server(add_precision_option(*cmd, f->precision));
  server(cmd->add_option("--threads", f->serve.threads, "kernel and BLAS threads")->capture_default_str());
  server(cmd->add_option("--block-tokens", f->serve.block_tokens, "tokens per KV block")->capture_default_str());
  server(cmd->add_option("--kv-memory", f->kv_memory, "KV cache size, e.g. 64M (default: --max-running whole contexts)"));
  server(cmd->add_option("--max-batch-tokens", f->serve.scheduler.max_batch_tokens, "rows an iteration computes at most")
             ->capture_default_str());
  server(cmd->add_option("--max-running", f->serve.scheduler.max_running, "sequences running at once")
             ->capture_default_str());
  server(cmd->add_option("--scheduler", f->scheduler, "iteration or request (batching)")->capture_default_str());
  server(cmd->add_flag("--reserve-max-tokens", f->serve.scheduler.reserve_max_tokens,
                       "admit a sequence only with KV blocks for its max_tokens (instead of paging)"));
  server(cmd->add_option("--tp", f->serve.tp, "tensor-parallel ranks in this process")->capture_default_str());
  server(cmd->add_option("--run-dir", f->serve.run_dir, "the server's serving record, for `parallax report`"));
  cmd->add_option("--requests", f->workload.requests, "requests to send")->capture_default_str();
  cmd->add_option("--rate", f->rate, "requests per second, Poisson arrivals (0 or inf: all at once)")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", f->client.max_concurrency, "requests in flight at most (closed loop)")
      ->capture_default_str();
  cmd->add_option("--seed", f->workload.seed, "seed of arrivals, lengths and prompts")->capture_default_str();
  cmd->add_option("--data", f->data, "text files prompts are cut from (default: the fortunes in "
                                     "/usr/share/games/fortunes, else ./README.md)");
  cmd->add_option("--prompt-bytes", f->prompt_bytes, "prompt length in bytes (= tokens), uniform LO:HI")
      ->capture_default_str();
  cmd->add_option("--output-tokens", f->output_tokens,
                  "max_tokens, uniform LO:HI (cut to what the prompt leaves of the context)")
      ->capture_default_str();
  cmd->add_option("--long-prompt-fraction", f->workload.long_prompt_fraction,
                  "fraction of requests whose prompt is --long-prompt-bytes")
      ->capture_default_str();
  cmd->add_option("--long-prompt-bytes", f->workload.long_prompt_bytes,
                  "a long prompt's bytes (0: the context less the shortest output)")
      ->capture_default_str();
  cmd->add_flag("--ask-whole-context", f->workload.ask_whole_context,
               "each request asks max_tokens = the rest of the context and its client ends the stream at the drawn "
               "output length (a byte model has no end-of-text token): what --reserve-max-tokens reserves");
  cmd->add_option("--slo", f->slo, "goodput objectives in ms, e.g. ttft:500,tpot:50 (keys ttft, tpot, e2e)");
  cmd->add_option("--out", f->out, "write the summary and every request (timings and text) as JSON");
  cmd->add_option("--context", f->context, "the model's context, for a server whose /v1/models does not say it");
  cmd->add_option("--timeout", f->client.timeout_seconds, "seconds a request may wait to connect or for a read")
      ->capture_default_str();
  cmd->add_option("--metrics-interval", f->client.metrics_interval, "seconds between /metrics polls (0: none)")
      ->capture_default_str();
  cmd->callback([f, url, checkpoint] {
    if (!*url && !*checkpoint) fail("bench serve: give --url http://HOST:PORT (a running server) or --checkpoint DIR");
    for (CLI::Option* option : f->server_flags)
      if (*url && *option)
        fail("bench serve: {} configures the server --checkpoint starts; the one at --url {} is configured already",
             option->get_name(), f->url);
    f->workload.rate = parse_rate(f->rate);
    f->workload.prompt_bytes = serve::parse_range(f->prompt_bytes, "--prompt-bytes", 1);
    f->workload.output_tokens = serve::parse_range(f->output_tokens, "--output-tokens", 1);
    serve::validate(f->workload);
    const serve::Slo slo = f->slo.empty() ? serve::Slo{} : serve::parse_slo(f->slo);
    std::signal(SIGPIPE, SIG_IGN);  // a connection closed mid-write is an error to record, not the end
    if (*url) return bench(*f, slo);
    serve::ServeThread server(server_options(*f), std::cerr);
    f->url = server.url();
    bench(*f, slo);
    server.stop();
  });
}

}  // namespace px::cli
