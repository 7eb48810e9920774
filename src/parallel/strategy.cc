#include "parallel/strategy.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"
#include "parallel/compose.h"

namespace px::parallel {

Recompute recompute_from_name(std::string_view name) {
  if (name == "none") return Recompute::none;
  if (name == "selective") return Recompute::selective;
  if (name == "full") return Recompute::full;
  fail("recompute '{}' is not one of none, selective (the attention core), full (each layer from its input)", name);
}

std::string_view recompute_name(Recompute recompute) {
  switch (recompute) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}

ContextMethod context_method_from_name(std::string_view name) {
  if (name == "ring") return ContextMethod::ring;
  if (name == "all-to-all") return ContextMethod::all_to_all;
  fail("context-parallel method '{}' is not one of: ring (key/value blocks passed around the ranks), all-to-all "
       "(DeepSpeed-Ulysses: heads scattered, the sequence gathered around attention)",
       name);
}

std::string_view context_method_name(ContextMethod method) {
  switch (method) {
    case ContextMethod::ring: return "ring";
    case ContextMethod::all_to_all: return "all-to-all";
  }
  return "?";
}

int Strategy::context_ranks() const {
  for (const MeshAxis& a : mesh.axes())
    if (a.name == context.axis) return a.size;
  return 1;
}

int Strategy::expert_ranks() const {
  for (const MeshAxis& a : mesh.axes())
    if (a.name == kExpertAxis) return a.size;
  return 1;
}

int Strategy::row_rank(const std::vector<int>& coords) const {
  const int data = mesh.axis(data_axis);
  return joined_coordinate(mesh, coords, data, expert_ranks() > 1 ? mesh.axis(std::string(kExpertAxis)) : -1);
}

int joined_axis(const Strategy& strategy) {
  if (strategy.context_ranks() > 1) return strategy.mesh.axis(strategy.context.axis);
  if (strategy.expert_ranks() > 1) return strategy.mesh.axis(std::string(kExpertAxis));
  return -1;
}

MeshGroups make_strategy_groups(comm::Communicator& world, const Strategy& strategy) {
  const int joined = joined_axis(strategy);
  if (joined < 0) return make_mesh_groups(world, strategy.mesh);
  return make_mesh_groups(world, strategy.mesh, strategy.mesh.axis(strategy.data_axis), joined);
}

int Strategy::pipeline_ranks() const {
  for (const MeshAxis& a : mesh.axes())
    if (a.name == pipeline.axis) return a.size;
  return 1;
}

nlohmann::json to_json(const Strategy& s) {
  nlohmann::json mesh = nlohmann::json::array();
  for (const MeshAxis& a : s.mesh.axes()) mesh.push_back({{"name", a.name}, {"size", a.size}});
  nlohmann::json seeds = nlohmann::json::array();
  for (const PlacementSeed& seed : s.seeds)
    seeds.push_back({{"value", seed.value}, {"axis", seed.axis}, {"placement", seed.placement.str()}});
  nlohmann::json json{{"mesh", mesh},
          {"data_axis", s.data_axis},
          {"seeds", seeds},
          {"zero_stage", s.zero_stage},
          {"micro_batches", s.micro_batches},
          {"lowering",
           {{"bucket_bytes", s.lowering.bucket_bytes},
            {"global_norm", s.lowering.global_norm},
            {"updates", s.lowering.updates},
            {"compression", s.lowering.compression.to_string()},
            {"local_momentum", s.lowering.local_momentum},
            {"recompute", recompute_name(s.lowering.recompute)},
            {"p3_slice_bytes", s.lowering.p3_slice_bytes}}},
          {"pipeline",
           {{"axis", s.pipeline.axis},
            {"schedule", pipeline_kind_name(s.pipeline.schedule)},
            {"virtual_stages", s.pipeline.virtual_stages},
            {"stage_cuts", s.pipeline.stage_cuts}}}};
  if (s.lowering.overlap_model_gradients) json["lowering"]["overlap_model_gradients"] = true;
  if (s.lowering.overlap_expert_exchanges) json["lowering"]["overlap_expert_exchanges"] = true;
  json["precision"] = std::string(precision_name(s.precision));
  if (!s.row_shares.empty()) json["row_shares"] = s.row_shares;
  if (s.context_ranks() > 1)
    json["context"] = {
        {"axis", s.context.axis}, {"method", context_method_name(s.context.method)}, {"balance", s.context.balance}};
  return json;
}

Strategy strategy_from_json(const nlohmann::json& json) {
  json_fields::check_keys("strategy", json, "the strategy", {"mesh", "data_axis", "seeds", "zero_stage", "micro_batches", "lowering", "pipeline", "precision", "context",
                                                         "row_shares"});
  Strategy s;
  if (json.contains("mesh")) {
    const nlohmann::json& mesh = json.at("mesh");
    if (!mesh.is_array()) fail("strategy: mesh must be an array of {{\"name\", \"size\"}} axes, got {}", mesh.dump());
    std::vector<MeshAxis> axes;
    for (const nlohmann::json& axis : mesh) {
      json_fields::check_keys("strategy", axis, "a mesh axis", {"name", "size"});
      axes.push_back({json_fields::field<std::string>("strategy", axis, "mesh axis", "name", ""), json_fields::field<int>("strategy", axis, "mesh axis", "size", 0)});
    }
    s.mesh = DeviceMesh(std::move(axes));
  }
  s.data_axis = json_fields::field<std::string>("strategy", json, "strategy", "data_axis", s.data_axis);
  if (json.contains("seeds")) {
    if (!json.at("seeds").is_array()) fail("strategy: seeds must be an array, got {}", json.at("seeds").dump());
    for (const nlohmann::json& seed : json.at("seeds")) {
      json_fields::check_keys("strategy", seed, "a seed", {"value", "axis", "placement"});
      s.seeds.push_back({json_fields::field<std::string>("strategy", seed, "seed", "value", ""), json_fields::field<std::string>("strategy", seed, "seed", "axis", ""),
                         placement_from_string(json_fields::field<std::string>("strategy", seed, "seed", "placement", ""))});
    }
  }
  s.zero_stage = json_fields::field<int>("strategy", json, "strategy", "zero_stage", s.zero_stage);
  s.micro_batches = json_fields::field<int>("strategy", json, "strategy", "micro_batches", s.micro_batches);
  if (json.contains("lowering")) {
    const nlohmann::json& l = json.at("lowering");
    json_fields::check_keys("strategy", l, "lowering",
               {"bucket_bytes", "global_norm", "updates", "compression", "local_momentum", "recompute",
                                 "p3_slice_bytes", "overlap_model_gradients", "overlap_expert_exchanges"});
    s.lowering.bucket_bytes = json_fields::field<int64_t>("strategy", l, "lowering", "bucket_bytes", s.lowering.bucket_bytes);
    s.lowering.global_norm = json_fields::field<bool>("strategy", l, "lowering", "global_norm", s.lowering.global_norm);
    s.lowering.updates = json_fields::field<bool>("strategy", l, "lowering", "updates", s.lowering.updates);
    s.lowering.compression = comm::compression::Spec::parse(json_fields::field<std::string>("strategy", l, "lowering", "compression", "none"));
    s.lowering.local_momentum = json_fields::field<double>("strategy", l, "lowering", "local_momentum", s.lowering.local_momentum);
    s.lowering.recompute = recompute_from_name(json_fields::field<std::string>("strategy", l, "lowering", "recompute", "none"));
    s.lowering.p3_slice_bytes =
        json_fields::field<int64_t>("strategy", l, "lowering", "p3_slice_bytes", s.lowering.p3_slice_bytes);
    s.lowering.overlap_model_gradients = json_fields::field<bool>("strategy", l, "lowering", "overlap_model_gradients",
                                                                  s.lowering.overlap_model_gradients);
    s.lowering.overlap_expert_exchanges = json_fields::field<bool>(
        "strategy", l, "lowering", "overlap_expert_exchanges", s.lowering.overlap_expert_exchanges);
  }
  if (json.contains("pipeline")) {
    const nlohmann::json& pl = json.at("pipeline");
    json_fields::check_keys("strategy", pl, "pipeline", {"axis", "schedule", "virtual_stages", "stage_cuts"});
    s.pipeline.axis = json_fields::field<std::string>("strategy", pl, "pipeline", "axis", s.pipeline.axis);
    s.pipeline.schedule = pipeline_kind_from_name(json_fields::field<std::string>("strategy", pl, "pipeline", "schedule", "1f1b"));
    s.pipeline.virtual_stages = json_fields::field<int>("strategy", pl, "pipeline", "virtual_stages", s.pipeline.virtual_stages);
    if (pl.contains("stage_cuts")) {
      if (!pl.at("stage_cuts").is_array()) fail("strategy: pipeline.stage_cuts must be an array of layer names");
      for (const nlohmann::json& cut : pl.at("stage_cuts")) {
        if (!cut.is_string()) fail("strategy: pipeline.stage_cuts holds {}, expected layer names", cut.dump());
        s.pipeline.stage_cuts.push_back(cut.get<std::string>());
      }
    }
  }
  if (json.contains("context")) {
    const nlohmann::json& c = json.at("context");
    json_fields::check_keys("strategy", c, "context", {"axis", "method", "balance"});
    s.context.axis = json_fields::field<std::string>("strategy", c, "context", "axis", s.context.axis);
    s.context.method = context_method_from_name(
        json_fields::field<std::string>("strategy", c, "context", "method", std::string(context_method_name(s.context.method))));
    s.context.balance = json_fields::field<bool>("strategy", c, "context", "balance", s.context.balance);
  }
  if (json.contains("row_shares")) {
    const nlohmann::json& shares = json.at("row_shares");
    if (!shares.is_array()) fail("strategy: row_shares must be an array of positive integers, got {}", shares.dump());
    for (const nlohmann::json& share : shares) {
      if (!share.is_number_integer()) fail("strategy: row_shares holds {}, expected positive integers", share.dump());
      s.row_shares.push_back(share.get<int64_t>());
    }
  }
  if (json.contains("precision")) {
    const std::string word = json_fields::field<std::string>("strategy", json, "strategy", "precision", "");
    if (word != "fp32" && word != "bf16") fail("strategy: precision '{}' is unknown: expected fp32 or bf16", word);
    s.precision = parse_precision(word);
  }
  validate(s);
  return s;
}

Strategy load_strategy(const std::string& path, bool* records_precision) {
  std::ifstream in(path);
  if (!in) fail("cannot open strategy file '{}'", path);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("strategy file '{}' is not valid JSON: {}", path, e.what());
  }
  if (records_precision != nullptr) *records_precision = json.is_object() && json.contains("precision");
  try {
    return strategy_from_json(json);
  } catch (const Error& e) {
    fail("strategy file '{}': {}", path, e.what());
  }
}

}  // namespace px::parallel
