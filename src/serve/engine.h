// The serving engine (Orca's iteration-level scheduling over vLLM's paged
// KV cache): HTTP threads submit requests and read their streams; one
// thread runs iterations, each joining what was submitted, dropping what
// was cancelled, computing the scheduled rows of every running sequence in
// one decode Program (runtime/decode) and handing each sampling sequence
// its next token at once. Only that thread touches the engine's state; a
// request's stream is the one thing both sides hold.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "graph/precision.h"
#include "runtime/decode/block_pool.h"
#include "runtime/decode/decode_runner.h"
#include "runtime/decode/token_sampler.h"
#include "serve/completion_request.h"
#include "serve/metrics.h"
#include "serve/scheduler.h"
#include "serve/text_stream.h"

namespace px::serve {

// The queue is full: the server answers 429 with Retry-After.
class QueueFull : public Error {
 public:
  using Error::Error;
};

struct EngineOptions {
  SchedulerLimits scheduler;
  decode::KvCacheShape cache;
  int64_t max_waiting = 256;  // requests queued before 429
  // FCFS's bound on waiting: a choice not started this long after it
  // arrived ends with an error (503 whole, an error event streamed), so no
  // client waits unboundedly behind a full pool. 0: no bound.
  int64_t max_queue_ms = 120000;
  Precision precision = Precision::fp32;
  // Tensor-parallel serving: this rank (the lead) and the group whose
  // followers run every iteration with it (nullptr: one rank).
  decode::DecodeGroup* group = nullptr;
};

// One token of one choice, or its end.
struct ChoiceEvent {
  int index = 0;                 // the choice, in the response's order
  std::string text;              // what this token made final (valid UTF-8, maybe empty)
  std::optional<int32_t> token;  // none on a final event that only ends the choice
  float logprob = 0;             // of `token` (with logprobs)
  std::vector<decode::TokenLogprob> top;  // the likeliest alternatives (with logprobs)
  std::string finish_reason;     // "" while it runs; "stop", "length"; "error" with `error`
  std::string error;             // why the choice ended without an answer (its wait passed --max-queue-ms)
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// One request's events, from the engine's thread to the one that answers it.
class RequestStream {
 public:
  // The events since the last call, waiting up to `timeout` for one.
  std::vector<ChoiceEvent> take(std::chrono::milliseconds timeout);
  bool finished() const;  // every choice has ended (its final event may still be untaken)
  // The client went away: the engine drops the request's sequences and
  // frees their blocks at its next iteration.
  void cancel();
  bool cancelled() const;
  Usage usage() const;

 private:
  friend class Engine;
  void push(ChoiceEvent event, bool ends_choice);

  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<ChoiceEvent> events_;
  int open_choices_ = 0;
  bool cancelled_ = false;
  Usage usage_;
};

class Engine {
 public:
  // `weights` are read in place: they must outlive the engine.
  Engine(const nn::GptConfig& config, const ParamStore& weights, EngineOptions options);
  ~Engine();

  // Queues a request's choices (n per prompt); QueueFull when
  // max_waiting requests wait. Any thread.
  std::shared_ptr<RequestStream> submit(const CompletionRequest& request);
  // One iteration; false when there was nothing to run. The engine's thread.
  bool step();
  // Steps until stop(), waiting for work at most `idle` at a time (after
  // each such wait a group's followers get an idle tick, so `idle` must be
  // well inside their communicator's timeout); then releases the followers.
  void run(std::chrono::milliseconds idle);
  // Drains: submit refuses from now on, run returns once every running
  // and waiting choice has ended. Any thread.
  void stop();

  // Lowers the decode Program of every iteration size up to the token
  // budget now, so no request waits for one; returns how many there are.
  int64_t prepare();

  const ServeMetrics& metrics() const { return metrics_; }
  RequestLimits limits() const;
  // Tokens the KV pool holds; one sequence of the model's context must fit.
  int64_t pool_tokens() const { return pool_.blocks() * pool_.block_tokens(); }

 private:
  struct Choice;
  void join_submitted();
  void drop_cancelled();
  void expire_waiting();
  void update_gauges(double iteration_seconds, int64_t generated);

  nn::GptConfig config_;
  EngineOptions options_;
  decode::DecodeRunner runner_;
  decode::BlockPool pool_;
  Scheduler scheduler_;
  ServeMetrics metrics_;
  std::map<uint64_t, std::unique_ptr<Choice>> choices_;  // by sequence id: those submitted and not ended

  mutable std::mutex inbox_mutex_;  // what other threads hand in
  std::condition_variable inbox_ready_;
  std::vector<std::unique_ptr<Choice>> inbox_;
  bool stopping_ = false;
  uint64_t next_id_ = 0;
  std::deque<std::pair<double, int64_t>> recent_;  // (time, tokens generated) of recent iterations
};

}  // namespace px::serve
