// An executor's programs: the per-instruction facts the step loop reads
// of the active one, and the other lowerings of its strategy (an epoch's
// partial last batch) swapped in by the rows of a step's batch.
#include <fmt/ranges.h>

#include "runtime/executor/program_executor.h"

namespace px {

using parallel::Buffer;
using parallel::Instr;

std::vector<ParamShard> ProgramExecutor::index_instructions() {
  liveness_ = parallel::liveness(program_);
  const size_t n = program_.instrs.size();
  last_compute_ = -1;
  for (size_t i = 0; i < n; ++i)
    if (std::holds_alternative<parallel::Compute>(program_.instrs[i].op)) last_compute_ = static_cast<int>(i);
  member_of_.assign(n, -1);
  shard_of_update_.assign(n, -1);
  carried_ = parallel::carried_instructions(program_.instrs);
  std::vector<ParamShard> shards;
  for (size_t i = 0; i < n; ++i) {
    const Instr& instr = program_.instrs[i];
    if (const auto* a = std::get_if<parallel::Accumulate>(&instr.op)) {
      const Buffer& buffer = program_.buffers[static_cast<size_t>(a->into.buffer)];
      for (size_t m = 0; m < buffer.members.size(); ++m)
        if (buffer.members[m].offset == a->into.offset) member_of_[i] = static_cast<int>(m);
      if (buffer.kind == Buffer::Kind::loss) member_of_[i] = 0;
    } else if (const auto* u = std::get_if<parallel::Update>(&instr.op)) {
      const parallel::ParamLayout& param = program_.params[static_cast<size_t>(u->param)];
      shard_of_update_[i] = static_cast<int>(shards.size());
      shards.push_back({param.name, param.shape, u->offset, u->count, param.weight_decay});
    }
  }
  return shards;
}

std::vector<int> ProgramExecutor::gradient_collectives() const {
  std::vector<int> ids;
  for (size_t i = 0; i < program_.instrs.size(); ++i) {
    const auto* c = std::get_if<parallel::Collective>(&program_.instrs[i].op);
    if (c != nullptr && program_.buffers[static_cast<size_t>(c->input.buffer)].kind == Buffer::Kind::grad_bucket)
      ids.push_back(static_cast<int>(i));
  }
  return ids;
}

void ProgramExecutor::add_program(parallel::Program program) {
  const parallel::Program& mine = program_;
  const int64_t rows = program.global_rows, mine_rows = program_.global_rows;
  auto differs = [&](std::string_view what) {
    fail("executor: the program for a batch of {} rows differs from the one for {} rows in its {}: both must be "
         "lowerings of one strategy on one rank",
         rows, mine_rows, what);
  };
  // Stage cuts the first program's lowering chose may be named in the other's strategy (with_stage_cuts_of).
  auto without_cuts = [](parallel::Strategy s) {
    s.pipeline.stage_cuts.clear();
    return s;
  };
  if (!(without_cuts(program.strategy) == without_cuts(mine.strategy)) || program.rank != mine.rank)
    differs("strategy or rank");
  if (program.pipeline.stage_layers != mine.pipeline.stage_layers) differs("pipeline stages");
  if (program.params != mine.params || program.buckets != mine.buckets) differs("parameter layout");
  if (program.buffers != mine.buffers) differs("buffers");
  if (!(program.collective == mine.collective)) differs("collective algorithm");
  if (has_program_for(program.global_rows)) return;
  // Indexed while active (the indexing reads program_), then put aside.
  Lowering other{.program = std::move(program)};
  swap_active(other);
  try {
    const std::vector<ParamShard> shards = index_instructions();
    if (optimizer_ ? shards != optimizer_->shards() : !shards.empty()) differs("optimizer shards");
    const std::vector<int> collectives = gradient_collectives();
    if (!codec_store_.empty()) {
      if (collectives.size() != codec_store_.size()) differs("gradient collectives");
      codecs_.clear();
      for (size_t k = 0; k < collectives.size(); ++k) codecs_[collectives[k]] = codec_store_[k].get();
    }
  } catch (...) {
    swap_active(other);  // the first program stays the active one
    throw;
  }
  swap_active(other);
  programs_.push_back(std::move(other));
}

bool ProgramExecutor::has_program_for(int64_t global_rows) const {
  if (program_.global_rows == global_rows) return true;
  for (const Lowering& l : programs_)
    if (l.program.global_rows == global_rows) return true;
  return false;
}

void ProgramExecutor::swap_active(Lowering& other) {
  std::swap(program_, other.program);
  std::swap(liveness_, other.liveness);
  std::swap(member_of_, other.member_of);
  std::swap(shard_of_update_, other.shard_of_update);
  std::swap(carried_, other.carried);
  std::swap(last_compute_, other.last_compute);
  std::swap(codecs_, other.codecs);
}

void ProgramExecutor::use_program_for(int64_t global_rows) {
  if (global_rows == 0 || global_rows == program_.global_rows) return;
  for (Lowering& other : programs_) {
    if (other.program.global_rows != global_rows) continue;
    // Deferred instructions and the engine's jobs name the active program's instructions.
    finish();
    flight_.forget_sites();
    swap_active(other);
    job_.assign(program_.instrs.size(), -1);
    wire_.assign(program_.instrs.size(), {});
    return;
  }
  std::vector<int64_t> rows{program_.global_rows};
  for (const Lowering& other : programs_) rows.push_back(other.program.global_rows);
  fail("executor: a batch of {} rows, but this rank's programs are lowered for batches of {} rows (add_program)",
       global_rows, fmt::join(rows, ", "));
}

}  // namespace px
