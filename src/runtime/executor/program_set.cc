#include "runtime/executor/program_set.h"

#include <fmt/ranges.h>

#include "core/error.h"

namespace px {

using parallel::Buffer;
using parallel::Instr;

IndexedProgram::IndexedProgram(parallel::Program p) : program(std::move(p)) {
  liveness = parallel::liveness(program);
  const size_t n = program.instrs.size();
  for (size_t i = 0; i < n; ++i)
    if (std::holds_alternative<parallel::Compute>(program.instrs[i].op)) last_compute = static_cast<int>(i);
  member_of.assign(n, -1);
  shard_of_update.assign(n, -1);
  carried = parallel::carried_instructions(program.instrs);
  for (size_t i = 0; i < n; ++i) {
    const Instr& instr = program.instrs[i];
    if (const auto* a = std::get_if<parallel::Accumulate>(&instr.op)) {
      const Buffer& buffer = program.buffers[static_cast<size_t>(a->into.buffer)];
      for (size_t m = 0; m < buffer.members.size(); ++m)
        if (buffer.members[m].offset == a->into.offset) member_of[i] = static_cast<int>(m);
      if (buffer.kind == Buffer::Kind::loss) member_of[i] = 0;
    } else if (const auto* u = std::get_if<parallel::Update>(&instr.op)) {
      const parallel::ParamLayout& param = program.params[static_cast<size_t>(u->param)];
      shard_of_update[i] = static_cast<int>(shards.size());
      shards.push_back({param.name, param.shape, u->offset, u->count, param.weight_decay, param.sign_rate});
    }
  }
}

void ProgramSet::add(parallel::Program program) {
  const parallel::Program& mine = programs_.front().program;
  const int64_t rows = program.global_rows, mine_rows = mine.global_rows;
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
  if (has_for(program.global_rows)) return;
  IndexedProgram other(std::move(program));
  if (other.shards != programs_.front().shards) differs("optimizer shards");
  programs_.push_back(std::move(other));
}

int ProgramSet::index_for(int64_t global_rows) const {
  for (size_t i = 0; i < programs_.size(); ++i)
    if (programs_[i].program.global_rows == global_rows) return static_cast<int>(i);
  return -1;
}

bool ProgramSet::switches_for(int64_t global_rows) const {
  if (global_rows == 0 || global_rows == active().program.global_rows) return false;
  if (index_for(global_rows) >= 0) return true;
  std::vector<int64_t> rows;
  for (const IndexedProgram& p : programs_) rows.push_back(p.program.global_rows);
  fail("executor: a batch of {} rows, but this rank's programs are lowered for batches of {} rows (add_program)",
       global_rows, fmt::join(rows, ", "));
}

}  // namespace px
