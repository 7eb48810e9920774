#include "runtime/train/checkpointer.h"

namespace px {

Checkpointer::Checkpointer(const std::string& dir, int keep_last, comm::Communicator* group,
                           SnapshotStore* snapshots, const parallel::Strategy& strategy)
    : group_(group),
      snapshots_(snapshots),
      mesh_(strategy.mesh.str()),
      compression_(strategy.lowering.compression.to_string()),
      memory_(new_memory_account()) {
  if (!dir.empty()) writer_.emplace(dir, group, keep_last);
}

void Checkpointer::save(ProgramExecutor& executor, CheckpointState state, bool last) {
  if (!writer_ && snapshots_ == nullptr) return;
  MemoryAccountScope charged(memory_);
  const int rank = group_ ? group_->rank() : 0;
  const int64_t step = state.step;
  RankSnapshot own{.step = step, .state = std::move(state), .runs = executor.state_runs()};
  if (executor.compressing()) {
    own.state.compression = compression_;
    own.compression = executor.gather_compression_state();  // collective: rank 0 gets every rank's
  }
  if (writer_) {
    // Collective: the model is gathered whole for model.safetensors (the
    // lead copies it: training goes on while it is written).
    const ParamStore params = executor.parameters();
    // On hosts' own disks each rank writes every copy it holds: a copy
    // another host's rank writes would be out of reach at the resume.
    CheckpointPart part{.shards = writer_->shared() ? own.runs : executor.state_runs(true),
                        .who = {{"mesh", mesh_}, {"coords", nlohmann::json(executor.program().coords).dump()}}};
    if (rank == 0) {
      for (const auto& [name, t] : params.named()) part.model.emplace_back(name, t.clone());
      part.state = own.state;
      part.compression = own.compression;
    }
    writer_->save(std::move(part));
    if (last) writer_->finish();
  }
  if (snapshots_ != nullptr) {
    std::optional<RankSnapshot> copy = group_ ? exchange_with_buddy(*group_, own) : std::nullopt;
    snapshots_->keep(rank, std::move(own), std::move(copy));
  }
}

}  // namespace px
