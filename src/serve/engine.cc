#include "serve/engine.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/rng.h"

namespace px::serve {

using Clock = std::chrono::steady_clock;

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

// One choice being generated, as the engine's thread holds it.
struct Engine::Choice {
  SequenceState sequence;
  decode::TokenSampler sampler;
  TextStream text;
  std::shared_ptr<RequestStream> stream;
  int index = 0;
  std::optional<int> logprobs;
  Clock::time_point arrival, last_token;
  bool first_token = true;
};

// ---- RequestStream ----

std::vector<ChoiceEvent> RequestStream::take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !events_.empty() || open_choices_ == 0; });
  std::vector<ChoiceEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

bool RequestStream::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return open_choices_ == 0;
}

void RequestStream::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
}

bool RequestStream::cancelled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cancelled_;
}

Usage RequestStream::usage() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return usage_;
}

void RequestStream::push(ChoiceEvent event, bool ends_choice) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (event.token) ++usage_.completion_tokens;
    if (ends_choice) --open_choices_;
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

// ---- Engine ----

Engine::Engine(const nn::GptConfig& config, const ParamStore& weights, EngineOptions options)
    : config_(config),
      options_(options),
      runner_(config, weights, options.cache, options.precision, options.group),
      pool_(options.cache.blocks, options.cache.block_tokens),
      scheduler_(options.scheduler, pool_) {
  if (pool_tokens() < config_.block)
    fail("the KV cache holds {} tokens ({} blocks of {}); one sequence of the model's context of {} needs {} blocks: "
         "raise --kv-memory",
         pool_tokens(), pool_.blocks(), pool_.block_tokens(), config_.block, pool_.blocks_for(config_.block));
  if (options_.max_waiting < 1) fail("--max-waiting is {}, expected >= 1", options_.max_waiting);
  metrics_.kv_blocks_total = pool_.blocks();
}

Engine::~Engine() = default;

int64_t Engine::prepare() {
  runner_.prepare(options_.scheduler.max_batch_tokens);
  metrics_.programs = static_cast<int64_t>(runner_.lowered().size());
  return metrics_.programs;
}

RequestLimits Engine::limits() const { return {.context = config_.block, .vocab = config_.vocab}; }

std::shared_ptr<RequestStream> Engine::submit(const CompletionRequest& request) {
  const int choices = static_cast<int>(request.prompts.size()) * request.n;
  for (const std::string& prompt : request.prompts)  // parse_completion_request's rule, for callers that skip it
    if (prompt.empty() || static_cast<int64_t>(prompt.size()) + request.max_tokens > config_.block)
      fail("a prompt of {} tokens and max_tokens {} do not fit the model's context of {}", prompt.size(),
           request.max_tokens, config_.block);
  auto stream = std::make_shared<RequestStream>();
  stream->open_choices_ = choices;
  std::lock_guard<std::mutex> lock(inbox_mutex_);
  if (stopping_) throw QueueFull("the server is shutting down and takes no new requests");
  const int64_t waiting = static_cast<int64_t>(inbox_.size()) + metrics_.waiting.load();
  if (waiting + choices > options_.max_waiting) {
    ++metrics_.rejected;
    throw QueueFull(fmt::format("{} choices wait already (at most {}); retry later", waiting, options_.max_waiting));
  }
  const Clock::time_point now = Clock::now();
  const uint64_t base_seed = request.seed ? *request.seed : splitmix64(next_id_ + 0x5eed);
  int index = 0;
  for (const std::string& prompt : request.prompts) {
    stream->usage_.prompt_tokens += static_cast<int64_t>(prompt.size());
    for (int k = 0; k < request.n; ++k, ++index) {
      auto choice = std::make_unique<Choice>(Choice{
          .sequence = {},
          .sampler = decode::TokenSampler(
              {.temperature = request.temperature, .top_k = request.top_k, .top_p = request.top_p},
              base_seed + static_cast<uint64_t>(index)),
          .text = TextStream(request.stop),
          .stream = stream,
          .index = index,
          .logprobs = request.logprobs,
          .arrival = now,
          .last_token = now});
      SequenceState& s = choice->sequence;
      s.id = next_id_++;
      for (unsigned char byte : prompt) s.tokens.push_back(byte);
      s.prompt = static_cast<int64_t>(s.tokens.size());
      s.max_tokens = request.max_tokens;
      inbox_.push_back(std::move(choice));
    }
  }
  inbox_ready_.notify_all();
  return stream;
}

void Engine::join_submitted() {
  std::vector<std::unique_ptr<Choice>> arrived;
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    arrived.swap(inbox_);
  }
  for (std::unique_ptr<Choice>& c : arrived) {
    scheduler_.add(&c->sequence);
    const uint64_t id = c->sequence.id;
    choices_.emplace(id, std::move(c));
  }
}

void Engine::drop_cancelled() {
  for (auto it = choices_.begin(); it != choices_.end();) {
    Choice& c = *it->second;
    if (!c.stream->cancelled()) {
      ++it;
      continue;
    }
    scheduler_.remove(&c.sequence);
    ++metrics_.cancelled;
    c.stream->push({.index = c.index, .finish_reason = "cancelled"}, true);
    it = choices_.erase(it);
  }
}


// Choices that never started (no token yet, not running) past the bound
// end: their clients get an error instead of waiting on.
void Engine::expire_waiting() {
  if (options_.max_queue_ms <= 0) return;
  const Clock::time_point now = Clock::now();
  const auto bound = std::chrono::milliseconds(options_.max_queue_ms);
  for (auto it = choices_.begin(); it != choices_.end();) {
    Choice& c = *it->second;
    if (!c.first_token || now - c.arrival <= bound || !scheduler_.is_waiting(&c.sequence)) {
      ++it;
      continue;
    }
    scheduler_.remove(&c.sequence);
    ++metrics_.failed;
    c.stream->push({.index = c.index,
                    .finish_reason = "error",
                    .error = fmt::format("the request waited {} ms in the queue without starting (--max-queue-ms {}): "
                                         "the server is overloaded; retry later",
                                         std::chrono::duration_cast<std::chrono::milliseconds>(now - c.arrival).count(),
                                         options_.max_queue_ms)},
                   true);
    it = choices_.erase(it);
  }
}

bool Engine::step() {
  join_submitted();
  drop_cancelled();
  expire_waiting();
  const Clock::time_point start = Clock::now();
  const Schedule schedule = scheduler_.next();
  metrics_.preemptions += schedule.preempted.size();
  if (schedule.chunks.empty()) {
    update_gauges(0, 0);
    return false;
  }
  std::vector<decode::SequenceChunk> chunks;
  for (const ScheduledChunk& c : schedule.chunks)
    chunks.push_back({.tokens = c.sequence->tokens, .start = c.start, .rows = c.rows, .blocks = c.sequence->blocks});
  const decode::DecodeBatch batch = decode::make_batch(chunks, runner_.table_entries(), pool_.block_tokens());
  const Tensor logits = runner_.run(batch);
  const Clock::time_point now = Clock::now();
  int64_t row = 0, generated = 0;
  for (const ScheduledChunk& c : schedule.chunks) {
    SequenceState& s = *c.sequence;
    Choice& choice = *choices_.at(s.id);
    s.computed += c.rows;
    if (s.computed <= s.prompt) metrics_.prompt_tokens += c.rows;
    row += c.rows;
    if (!c.samples) continue;
    const float* last = logits.f32() + (row - 1) * config_.vocab;
    const int32_t token = choice.sampler.next(last, config_.vocab);
    s.tokens.push_back(token);
    ++generated;
    ChoiceEvent event{.index = choice.index, .text = choice.text.push(static_cast<char>(token)), .token = token};
    if (choice.logprobs) {
      event.logprob = decode::TokenSampler::logprob_of(last, config_.vocab, token);
      event.top = decode::TokenSampler::top_logprobs(last, config_.vocab, *choice.logprobs);
    }
    const double latency = seconds_between(choice.first_token ? choice.arrival : choice.last_token, now);
    (choice.first_token ? metrics_.time_to_first_token : metrics_.inter_token_latency).observe(latency);
    (choice.first_token ? metrics_.recent_ttft : metrics_.recent_itl).add(latency);
    choice.first_token = false;
    choice.last_token = now;
    if (choice.text.stopped()) {
      event.finish_reason = "stop";
      ++metrics_.finished_stop;
    } else if (s.generated() == s.max_tokens || static_cast<int64_t>(s.tokens.size()) >= config_.block) {
      event.text += choice.text.finish();
      event.finish_reason = "length";
      ++metrics_.finished_length;
    }
    const bool ends = !event.finish_reason.empty();
    choice.stream->push(std::move(event), ends);
    if (ends) {
      metrics_.request_seconds.observe(seconds_between(choice.arrival, now));
      scheduler_.remove(&s);
      choices_.erase(s.id);
    }
  }
  metrics_.generated_tokens += static_cast<uint64_t>(generated);
  ++metrics_.iterations;
  metrics_.iteration_rows += static_cast<uint64_t>(batch.rows());
  update_gauges(seconds_between(start, Clock::now()), generated);
  return true;
}

void Engine::update_gauges(double iteration_seconds, int64_t generated) {
  if (iteration_seconds > 0) metrics_.iteration_seconds.observe(iteration_seconds);
  metrics_.running = scheduler_.running();
  metrics_.waiting = scheduler_.waiting();
  metrics_.kv_blocks_used = pool_.used_blocks();
  metrics_.programs = static_cast<int64_t>(runner_.lowered().size());
  // Tokens per second over the last five seconds of iterations.
  const double now = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  recent_.emplace_back(now, generated);
  while (!recent_.empty() && recent_.front().first < now - 5) recent_.pop_front();
  int64_t tokens = 0;
  for (const auto& [t, n] : recent_) tokens += n;
  metrics_.tokens_per_second = recent_.size() > 1 ? static_cast<double>(tokens) / std::max(now - recent_.front().first, 1e-3) : 0;
}

void Engine::run(std::chrono::milliseconds idle) {
  for (;;) {
    if (step()) continue;
    std::unique_lock<std::mutex> lock(inbox_mutex_);
    if (stopping_ && inbox_.empty() && choices_.empty()) break;
    const bool woken = inbox_ready_.wait_for(lock, idle, [&] { return !inbox_.empty() || stopping_; });
    lock.unlock();
    if (!woken) runner_.idle();
  }
  runner_.stop_followers();
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    stopping_ = true;
  }
  inbox_ready_.notify_all();
}

}  // namespace px::serve
