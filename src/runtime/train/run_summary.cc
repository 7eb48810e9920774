#include "runtime/train/run_summary.h"

#include <set>

#include "plan/candidates.h"
#include "core/atomic_file.h"
#include "runtime/tasks/model_json.h"

namespace px {

nlohmann::json placement_summary(const parallel::Strategy& strategy, const std::vector<parallel::Program>& programs) {
  nlohmann::json rows = nlohmann::json::array();
  std::set<std::string> seen;
  for (const parallel::Program& program : programs)
    for (const parallel::ParamLayout& p : program.params) {
      if (!seen.insert(p.name).second) continue;
      nlohmann::json placements = nlohmann::json::object();
      for (size_t a = 0; a < strategy.mesh.axes().size() && a < p.placement.size(); ++a)
        placements[strategy.mesh.axes()[a].name] = p.placement[a].str();
      rows.push_back({{"parameter", p.name},
                      {"shape", p.global_shape.dims()},
                      {"local_shape", p.shape.dims()},
                      {"placements", std::move(placements)}});
    }
  return rows;
}

// Sequence parallelism as the strategy has it: a seed splitting an
// activation along the sequence (dim 1), whether it came from --sp or from
// a strategy file's seeds.
bool splits_the_sequence(const parallel::Strategy& strategy, const std::vector<parallel::Program>& programs) {
  for (const parallel::PlacementSeed& seed : strategy.seeds) {
    if (seed.placement != Placement::S(1)) continue;
    for (const parallel::Program& program : programs)
      for (const Graph& graph : program.graphs)
        for (const Value& value : graph.values())
          if (value.name == seed.value && value.kind == Value::Kind::activation) return true;
  }
  return false;
}

nlohmann::json schedule_summary(const parallel::Strategy& strategy, const parallel::Program& program) {
  const parallel::PipelineSchedule schedule =
      strategy.pipeline_ranks() > 1
          ? program.pipeline.schedule
          : parallel::make_pipeline_schedule(parallel::PipelineKind::one_f_one_b, 1, strategy.micro_batches);
  const parallel::PipelineTimeline timeline = parallel::simulate_pipeline(schedule);
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& slots : timeline.ranks) {
    nlohmann::json row = nlohmann::json::array();
    for (const auto& slot : slots)
      row.push_back({{"start", slot.start},
                     {"length", slot.length},
                     {"op", parallel::pipeline_op_name(slot.action.op)},
                     {"micro", slot.action.micro},
                     {"chunk", slot.action.chunk},
                     {"label", slot.action.str()}});
    ranks.push_back(std::move(row));
  }
  return {{"kind", strategy.pipeline_ranks() > 1 ? parallel::pipeline_kind_name(schedule.kind) : "none"},
          {"stages", schedule.stages},
          {"micro_batches", schedule.micro_batches},
          {"virtual_stages", schedule.virtual_stages},
          {"makespan", timeline.makespan},
          {"bubble", timeline.bubble_fraction()},
          {"ranks", std::move(ranks)}};
}

nlohmann::json run_summary(const nn::ModelConfig& model, const DataOptions& data, const parallel::Strategy& strategy,
                           const std::vector<parallel::Program>& programs, const DataParallelResult& result,
                           const RunFigures& figures) {
  const RunReport& run = result.run;
  nlohmann::json axes = nlohmann::json::array();
  std::string mesh;
  for (const parallel::MeshAxis& a : strategy.mesh.axes()) {
    axes.push_back({{"name", a.name}, {"size", a.size}});
    mesh += fmt::format("{}{}={}", mesh.empty() ? "" : ",", a.name, a.size);
  }
  const bool pipelined = strategy.pipeline_ranks() > 1;
  nlohmann::json summary{
      {"model", model.kind},
      {"config", model_json(model, data)},
      {"ranks", strategy.mesh.ranks()},
      {"threads", figures.threads},
      {"mesh", mesh},
      {"mesh_axes", std::move(axes)},
      {"batch", data.batch},
      {"unit", figures.unit == "tok" ? "tokens" : figures.unit == "img" ? "images" : figures.unit},
      {"units_per_step", figures.units_per_step},
      {"steps", run.steps},
      {"steps_run", run.losses.size()},
      {"seconds", run.seconds},
      {"final",
       {{"train_loss", run.last_train_loss},
        {"val_loss", run.evaluation.loss},
        {"val_accuracy", run.evaluation.accuracy >= 0 ? nlohmann::json(run.evaluation.accuracy) : nullptr}}},
      {"measured_step_s", result.data_parallel.measured_step_seconds},
      {"memory", {{"measured_peak_bytes", figures.measured_peak_bytes}}},
      {"bytes_per_axis", result.data_parallel.bytes_per_axis},
      {"stragglers", result.data_parallel.stragglers},
      {"strategy", parallel::to_json(strategy)},
      {"strategy_summary",
       {{"description", plan::describe(strategy)},
        {"zero_stage", strategy.zero_stage},
        {"micro_batches", strategy.micro_batches},
        {"schedule", pipelined ? nlohmann::json(parallel::pipeline_kind_name(strategy.pipeline.schedule)) : nullptr},
        {"recompute", parallel::recompute_name(strategy.lowering.recompute)},
        {"compression", strategy.lowering.compression.to_string()},
        {"sequence_parallel", splits_the_sequence(strategy, programs)},
        {"placements", placement_summary(strategy, programs)}}},
      {"schedule", schedule_summary(strategy, programs.front())}};
  if (const RunPrediction* p = figures.prediction) {
    summary["predicted_step_s"] = p->step_seconds;
    summary["prediction_basis"] = p->basis;
    summary["prediction_calibrated"] = p->calibrated;
    summary["memory"]["predicted_peak_bytes"] = p->peak_bytes_per_rank;
    nlohmann::json ranks = nlohmann::json::array();
    for (size_t r = 0; r < programs.size(); ++r) ranks.push_back({{"rank", r}, {"events", nlohmann::json::array()}});
    for (const plan::SimulatedEvent& e : p->timeline)
      if (e.rank >= 0 && static_cast<size_t>(e.rank) < programs.size())
        ranks[static_cast<size_t>(e.rank)]["events"].push_back(
            {{"lane", e.lane}, {"name", e.name}, {"start", e.start}, {"dur", e.duration}, {"instr", e.instr}});
    summary["predicted_timeline"] = {{"step_s", p->step_seconds}, {"ranks", std::move(ranks)}};
  }
  return summary;
}

void write_run_strategy(const std::string& dir, const parallel::Strategy& strategy) {
  write_file_atomically(dir + "/strategy.json", parallel::to_json(strategy).dump(1) + "\n");
}

void write_run_summary(const std::string& dir, const nlohmann::json& summary) {
  write_file_atomically(dir + "/run.json", summary.dump(1) + "\n");
}

}  // namespace px
