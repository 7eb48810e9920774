// The executor's entries in its rank's flight recorder (runtime/fault/flight_recorder.h):
// where it is (step, instruction) and every collective, reshard and
// transfer it posts and completes, with the sequence number its group
// gives it; and the context an error in an instruction is reported with.
#include "runtime/executor/program_executor.h"
#include "runtime/fault/flight_recorder.h"

namespace px {

std::optional<ProgramExecutor::FlightSite> ProgramExecutor::flight_site(int id) const {
  const parallel::Instr& instr = program_.instrs[static_cast<size_t>(id)];
  auto axis_name = [&](int axis) { return program_.strategy.mesh.axes()[static_cast<size_t>(axis)].name; };
  // The lowering's sequence number: (step, group, n) names one call on every member.
  const auto sequence = static_cast<uint64_t>(std::max<int64_t>(instr.sequence, 0));
  const auto wire = static_cast<uint64_t>(instr.wire.total());
  return std::visit(
      [&](const auto& op) -> std::optional<FlightSite> {
        using T = std::decay_t<decltype(op)>;
        if constexpr (std::is_same_v<T, parallel::Collective>) {
          return FlightSite{.kind = FlightKind::collective,
                            .what = std::string(comm::collective_name(op.kind)),
                            .axis = axis_name(op.axis),
                            .sequence = sequence,
                            .bytes = wire};
        } else if constexpr (std::is_same_v<T, parallel::Reshard>) {
          if (instr.group < 0) return std::nullopt;  // a slice: nothing to wait for
          return FlightSite{.kind = FlightKind::reshard,
                            .what = fmt::format("reshard {} -> {}", op.from.str(), op.to.str()),
                            .axis = axis_name(op.axis),
                            .sequence = sequence,
                            .bytes = wire};
        } else if constexpr (std::is_same_v<T, parallel::Send> || std::is_same_v<T, parallel::Recv>) {
          const Graph& g = program_.graph_of(instr.micro_batch);
          constexpr bool sending = std::is_same_v<T, parallel::Send>;
          // A transfer is named by its tag; a receive's bytes are its sender's.
          return FlightSite{.kind = sending ? FlightKind::send : FlightKind::recv,
                            .what = sending ? "send" : "receive",
                            .axis = axis_name(op.axis),
                            .sequence = static_cast<uint64_t>(op.tag),
                            .bytes = static_cast<uint64_t>(g.spec(op.value).shape.numel()) * dtype_size(g.spec(op.value).dtype),
                            .peer = transfers_->world_rank(op.axis, op.peer)};
        } else {
          return std::nullopt;
        }
      },
      instr.op);
}

void ProgramExecutor::flight_done(int id) {
  auto it = flight_events_.find(id);
  if (it == flight_events_.end()) return;
  recorder_->done(it->second);
  flight_events_.erase(it);
}

void ProgramExecutor::flight_jobs_done() {
  if (!recorder_) return;
  for (auto it = flight_events_.begin(); it != flight_events_.end();) {
    const JobId job = job_.empty() ? -1 : job_[static_cast<size_t>(it->first)];
    if (job >= 0 && engine_->finished(job)) {
      recorder_->done(it->second);
      it = flight_events_.erase(it);
    } else {
      ++it;
    }
  }
}

std::optional<ProgramExecutor::FlightSite> ProgramExecutor::site_of(int id) const {
  auto it = flight_sites_.find(id);
  if (it == flight_sites_.end()) return std::nullopt;
  return it->second;
}

int ProgramExecutor::oldest_pending_event() const {
  for (const auto& [id, event] : flight_events_) {
    const JobId job = job_.empty() ? -1 : job_[static_cast<size_t>(id)];
    if (job < 0 || !engine_ || !engine_->finished(job)) return id;
  }
  return -1;
}

Error ProgramExecutor::in_context(int id, const std::optional<FlightSite>& site, const std::exception& e) const {
  if (id < 0) return Error(fmt::format("step {}: {}", step_ + 1, e.what()));
  const parallel::Instr& instr = program_.instrs[static_cast<size_t>(id)];
  std::string where = fmt::format("step {}, instruction #{}", step_ + 1, id);
  if (!instr.name.empty()) where += fmt::format(" '{}'", instr.name);
  if (site)
    where += fmt::format(" ({} on axis {}, {} {})", site->what, site->axis,
                         site->kind == FlightKind::send || site->kind == FlightKind::recv ? "tag" : "sequence",
                         site->sequence);
  return Error(fmt::format("{}: {}", where, e.what()));
}

}  // namespace px
