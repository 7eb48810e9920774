#include "runtime/tasks/model_json.h"

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace px {

nlohmann::json model_json(const nn::ModelConfig& o, const DataOptions& data) {
  nlohmann::json j{{"model", o.kind}, {"data", data.path}};
  if (o.kind == "gpt") {
    j["gpt"] = {{"vocab", o.gpt.vocab},     {"block", o.gpt.block},   {"n_layer", o.gpt.n_layer},
                {"n_head", o.gpt.n_head},   {"n_embd", o.gpt.n_embd}, {"dropout", o.gpt.dropout}};
    if (o.gpt.moe_experts > 0)
      j["gpt"]["moe"] = {{"experts", o.gpt.moe_experts},       {"top_k", o.gpt.moe_top_k},
                         {"every", o.gpt.moe_every},           {"width", o.gpt.moe_width},
                         {"balance", o.gpt.moe_balance},       {"bias_rate", o.gpt.moe_bias_rate},
                         {"capacity_factor", o.gpt.capacity_factor}, {"aux_loss_coef", o.gpt.aux_loss_coef},
                         {"z_loss_coef", o.gpt.z_loss_coef}};
  }
  if (o.kind == "mlp") j["mlp"] = {{"inputs", o.mlp.inputs}, {"hidden", o.mlp.hidden}, {"classes", o.mlp.classes}};
  if (o.kind == "cnn")
    j["cnn"] = {{"channels1", o.cnn.channels1}, {"channels2", o.cnn.channels2}, {"hidden", o.cnn.hidden},
                {"classes", o.cnn.classes}};
  if (nn::is_onnx_path(o.kind)) {
    nlohmann::json inputs = nlohmann::json::object();
    for (const nn::InputBinding& b : o.onnx.bindings) inputs[b.input] = nn::input_role_name(b.role);
    j["onnx"] = {{"loss", o.onnx.loss}, {"inputs", inputs}};
  }
  return j;
}

namespace {

// The model config saved with a checkpoint, read field by field: a damaged
// or hand-edited file gets a px::Error naming the field and its value.
// Sizes are integers (a JSON 1e300 must not become an int64) and the model
// kind one parallax knows.
class ModelConfigReader {
 public:
  explicit ModelConfigReader(const nlohmann::json& config) : config_(config) {
    if (!config.is_object()) fail("checkpoint model config is {}, expected a JSON object", config.dump());
  }
  const nlohmann::json& section(const std::string& key) const {
    if (!config_.contains(key) || !config_.at(key).is_object())
      fail("checkpoint model config has no '{}' object: {}", key, config_.dump());
    return config_.at(key);
  }
  std::string string(const std::string& key, std::string fallback) const {
    if (!config_.contains(key)) return fallback;
    if (!config_.at(key).is_string())
      fail("checkpoint model config: {} is {}, expected a string", key, config_.at(key).dump());
    return config_.at(key).get<std::string>();
  }
  static int64_t size(const nlohmann::json& section, const std::string& where, const std::string& key) {
    if (!section.contains(key)) fail("checkpoint model config: {}.{} is missing, expected an integer", where, key);
    return integer(section.at(key), where + "." + key);
  }
  static int64_t integer(const nlohmann::json& v, const std::string& what) {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
      fail("checkpoint model config: {} is {}, expected an integer", what, v.dump());
    return v.get<int64_t>();
  }
  static double number(const nlohmann::json& section, const std::string& where, const std::string& key) {
    if (!section.contains(key) || !section.at(key).is_number())
      fail("checkpoint model config: {}.{} is {}, expected a number", where, key,
           section.contains(key) ? section.at(key).dump() : "missing");
    return section.at(key).get<double>();
  }

 private:
  const nlohmann::json& config_;
};

// The "onnx" section: {"loss": "", "inputs": {"x": "images", ...}}.
nn::OnnxConfig read_onnx_config(const nlohmann::json& section) {
  nn::OnnxConfig onnx;
  if (!section.contains("loss") || !section.at("loss").is_string() || !section.contains("inputs") ||
      !section.at("inputs").is_object())
    fail("checkpoint model config: onnx is {}, expected {{\"loss\": string, \"inputs\": object}}", section.dump());
  onnx.loss = section.at("loss").get<std::string>();
  for (const auto& [name, role] : section.at("inputs").items()) {
    if (!role.is_string()) fail("checkpoint model config: onnx.inputs.{} is {}, expected a role", name, role.dump());
    onnx.bindings.push_back({.input = name, .role = nn::input_role(role.get<std::string>())});
  }
  return onnx;
}

}  // namespace

void apply_model_json(const nlohmann::json& j, nn::ModelConfig& o, DataOptions& data) {
  const ModelConfigReader config(j);
  o.kind = config.string("model", "");
  const bool onnx = nn::is_onnx_path(o.kind);
  if (o.kind != "gpt" && o.kind != "mlp" && o.kind != "cnn" && !onnx)
    fail("checkpoint model config: model is '{}', expected gpt, mlp, cnn or a FILE.onnx", o.kind);
  data.path = config.string("data", "");
  using R = ModelConfigReader;
  if (onnx) {
    o.onnx = read_onnx_config(config.section("onnx"));
  } else if (o.kind == "gpt") {
    const auto& g = config.section("gpt");
    o.gpt = {.vocab = R::size(g, "gpt", "vocab"), .block = R::size(g, "gpt", "block"),
             .n_layer = R::size(g, "gpt", "n_layer"), .n_head = R::size(g, "gpt", "n_head"),
             .n_embd = R::size(g, "gpt", "n_embd"), .dropout = R::number(g, "gpt", "dropout")};
    if (g.contains("moe")) {  // a mixture of experts; absent: dense
      const auto& moe = g.at("moe");
      if (!moe.is_object()) fail("checkpoint model config: gpt.moe is {}, expected an object", moe.dump());
      o.gpt.moe_experts = R::size(moe, "gpt.moe", "experts");
      o.gpt.moe_top_k = R::size(moe, "gpt.moe", "top_k");
      o.gpt.moe_every = R::size(moe, "gpt.moe", "every");
      o.gpt.moe_width = R::size(moe, "gpt.moe", "width");
      o.gpt.capacity_factor = R::number(moe, "gpt.moe", "capacity_factor");
      if (moe.contains("balance")) {
        if (!moe.at("balance").is_string())
          fail("checkpoint model config: gpt.moe.balance is {}, expected \"aux\" or \"bias\"", moe.at("balance").dump());
        o.gpt.moe_balance = moe.at("balance").get<std::string>();
      }
      if (moe.contains("bias_rate")) o.gpt.moe_bias_rate = R::number(moe, "gpt.moe", "bias_rate");
      o.gpt.aux_loss_coef = R::number(moe, "gpt.moe", "aux_loss_coef");
      o.gpt.z_loss_coef = R::number(moe, "gpt.moe", "z_loss_coef");
    }
  } else if (o.kind == "mlp") {
    const auto& m = config.section("mlp");
    if (!m.contains("hidden") || !m.at("hidden").is_array())
      fail("checkpoint model config: mlp.hidden is {}, expected an array of widths",
           m.contains("hidden") ? m.at("hidden").dump() : "missing");
    std::vector<int64_t> hidden;
    for (size_t i = 0; i < m.at("hidden").size(); ++i)
      hidden.push_back(R::integer(m.at("hidden")[i], fmt::format("mlp.hidden[{}]", i)));
    o.mlp = {.inputs = R::size(m, "mlp", "inputs"), .hidden = hidden, .classes = R::size(m, "mlp", "classes")};
  } else {
    const auto& c = config.section("cnn");
    o.cnn = {.channels1 = R::size(c, "cnn", "channels1"), .channels2 = R::size(c, "cnn", "channels2"),
             .hidden = R::size(c, "cnn", "hidden"), .classes = R::size(c, "cnn", "classes")};
  }
}

}  // namespace px
