#include "runtime/executor/flight_log.h"

#include <fmt/format.h>

#include "comm/collectives.h"

namespace px {

std::optional<FlightSite> flight_site(const parallel::Program& program, const Transfers& transfers, int id) {
  const parallel::Instr& instr = program.instrs[static_cast<size_t>(id)];
  auto axis_name = [&](int axis) { return program.strategy.mesh.axes()[static_cast<size_t>(axis)].name; };
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
        } else if constexpr (std::is_same_v<T, parallel::Route>) {
          return FlightSite{.kind = FlightKind::reshard,
                            .what = "routed all_to_all_v",
                            .axis = axis_name(op.axis),
                            .sequence = sequence,
                            .bytes = wire};
        } else if constexpr (std::is_same_v<T, parallel::Send> || std::is_same_v<T, parallel::Recv>) {
          constexpr bool sending = std::is_same_v<T, parallel::Send>;
          // A transfer is named by its tag; its bytes are the stamped wire
          // (in the dtype it travels in; a receive's, what its sender sends).
          return FlightSite{.kind = sending ? FlightKind::send : FlightKind::recv,
                            .what = sending ? "send" : "receive",
                            .axis = axis_name(op.axis),
                            .sequence = static_cast<uint64_t>(op.tag),
                            .bytes = wire,
                            .peer = transfers.world_rank(op.axis, op.peer)};
        } else {
          return std::nullopt;
        }
      },
      instr.op);
}

Error in_context(const parallel::Program& program, uint64_t step, int id, const std::optional<FlightSite>& site,
                 const std::exception& e) {
  if (id < 0) return Error(fmt::format("step {}: {}", step + 1, e.what()));
  const parallel::Instr& instr = program.instrs[static_cast<size_t>(id)];
  std::string where = fmt::format("step {}, instruction #{}", step + 1, id);
  if (!instr.name.empty()) where += fmt::format(" '{}'", instr.name);
  if (site)
    where += fmt::format(" ({} on axis {}, {} {})", site->what, site->axis,
                         site->kind == FlightKind::send || site->kind == FlightKind::recv ? "tag" : "sequence",
                         site->sequence);
  return Error(fmt::format("{}: {}", where, e.what()));
}

std::optional<FlightSite> FlightLog::at(const parallel::Program& program, const Transfers& transfers, int64_t position,
                                        int id) {
  const parallel::Instr& instr = program.instrs[static_cast<size_t>(id)];
  recorder_->at(position, id, instr.name);
  std::optional<FlightSite> site = flight_site(program, transfers, id);
  if (site) {
    sites_[id] = *site;
    events_[id] = recorder_->post(site->kind, site->axis, site->sequence, position, id,
                                  site->what + (instr.name.empty() ? "" : " " + instr.name), site->bytes, site->peer);
  }
  return site;
}

void FlightLog::done(int id, bool ok) {
  auto it = events_.find(id);
  if (it == events_.end()) return;
  recorder_->done(it->second, ok);
  events_.erase(it);
}

void FlightLog::done_where(const std::function<bool(int id)>& finished) {
  if (!recorder_) return;
  for (auto it = events_.begin(); it != events_.end();) {
    if (finished(it->first)) {
      recorder_->done(it->second);
      it = events_.erase(it);
    } else {
      ++it;
    }
  }
}

int FlightLog::oldest_open(const std::function<bool(int id)>& finished) const {
  for (const auto& [id, event] : events_)
    if (!finished(id)) return id;
  return -1;
}

std::optional<FlightSite> FlightLog::site_of(int id) const {
  auto it = sites_.find(id);
  if (it == sites_.end()) return std::nullopt;
  return it->second;
}

}  // namespace px
