#include "runtime/train/pipeline_report.h"

#include <algorithm>

#include <fmt/format.h>

namespace px {

int max_in_flight(const parallel::PipelineSchedule& schedule, int rank) {
  int now = 0, most = 0;
  for (const parallel::PipelineAction& a : schedule.ranks.at(static_cast<size_t>(rank))) {
    if (a.op == parallel::PipelineOp::forward) most = std::max(most, ++now);
    if (a.op == parallel::PipelineOp::backward || a.op == parallel::PipelineOp::backward_weight) --now;
  }
  return most;
}

std::string describe_measured_pipeline(const parallel::PipelineLayout& pipeline,
                                       const std::vector<StageMeasurement>& stages) {
  const parallel::PipelineSchedule& s = pipeline.schedule;
  const double analytical = parallel::simulate_pipeline(s).bubble_fraction();
  // Idle over stages x the longest span: a stage that finishes early idles until the last one is done.
  double busy = 0, span = 0;
  for (const StageMeasurement& m : stages) {
    busy += m.busy_us;
    span = std::max(span, m.span_us);
  }
  const double bubble = span > 0 ? 1 - busy / (span * static_cast<double>(stages.size())) : 0.0;
  std::string out = fmt::format("pipeline bubble: measured {:.1f}% of the pipelined time, analytical {:.1f}% ({})\n",
                                100 * bubble, 100 * analytical, parallel::pipeline_kind_name(s.kind));
  for (size_t r = 0; r < stages.size(); ++r) {
    const StageMeasurement& m = stages[r];
    const int in_flight = max_in_flight(s, static_cast<int>(r));
    // A chunk holds about 1/V of the rank's per-micro-batch activations.
    const double formula = static_cast<double>(in_flight) * static_cast<double>(m.micro_batch_stash_bytes) /
                           s.virtual_stages;
    out += fmt::format(
        "  stage {}: busy {:.1f} ms of {:.1f} ms (idle {:.1f}%); peak activations {:.2f} MiB, formula {} in flight x "
        "{:.2f} MiB = {:.2f} MiB\n",
        r, m.busy_us / 1e3, m.span_us / 1e3, m.span_us > 0 ? 100 * (1 - m.busy_us / m.span_us) : 0.0,
        double(m.activation_peak_bytes) / (1 << 20), in_flight,
        double(m.micro_batch_stash_bytes) / s.virtual_stages / (1 << 20), formula / (1 << 20));
  }
  return out;
}

}  // namespace px
