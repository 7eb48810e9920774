#include "plan/stage_layouts.h"

#include <algorithm>

#include "plan/candidates.h"

namespace px::plan {

using parallel::PipelineKind;
using parallel::Recompute;

std::vector<StageLayout> stage_layouts(const PlanRequest& request, int most_stages) {
  const SearchSpace& space = request.space;
  const ClusterSpec& cluster = *request.cluster;
  std::vector<StageLayout> layouts;
  for (int tp : divisors(request.ranks)) {
    if (tp > 1 && (!space.tensor || tp > cluster.devices_per_node)) continue;  // tensor groups stay in a node
    for (int stages : divisors(request.ranks / tp)) {
      if (stages > 1 && (!space.pipeline || stages > most_stages)) continue;
      const int dp = request.ranks / tp / stages;
      const int64_t rows = (request.batch + dp - 1) / dp;  // data rank 0's
      if (request.batch < dp) continue;
      const int most_micro = std::max(space.max_micro_batches, 8 * stages);
      for (bool sp : {false, true}) {
        if (sp && tp == 1) continue;
        for (int m = 1; m <= rows && m <= most_micro; m *= 2) {
          for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
            if (r != Recompute::none && !space.recompute) continue;
            std::vector<PipelineKind> kinds{PipelineKind::one_f_one_b};
            if (stages > 1 && space.schedules) kinds = {PipelineKind::gpipe, PipelineKind::one_f_one_b, PipelineKind::zb_h1};
            // Interleaved: Megatron-LM's two chunks a rank, where the schedule takes M.
            const bool interleaved = stages > 1 && space.schedules && m % stages == 0 && 2 * stages <= most_stages;
            if (interleaved) kinds.push_back(PipelineKind::interleaved);
            for (PipelineKind kind : kinds)
              for (int zero = 0; zero <= (space.zero && dp > 1 ? 3 : 0); ++zero)
                if (zero < 3 || stages == 1)
                  layouts.push_back({stages, dp, tp, sp, m, r, kind, zero, kind == PipelineKind::interleaved ? 2 : 1});
          }
        }
      }
    }
  }
  return layouts;
}

}  // namespace px::plan
