#include "runtime/checkpoint/checkpoint_state.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/json_fields.h"

namespace px {
namespace {

// A JSON value for a message: its text, cut short when long.
std::string brief(const nlohmann::json& value) {
  std::string text = value.dump();
  return text.size() <= 80 ? text : text.substr(0, 77) + "...";
}

bool is_count(const nlohmann::json& value) {
  return value.is_number_unsigned() || (value.is_number_integer() && value.get<int64_t>() >= 0);
}

// A file list's entry: a path inside the checkpoint (never absolute, never
// up and out) and its byte count.
void check_listed_file(const std::string& document, const std::string& name, const nlohmann::json& bytes) {
  const std::filesystem::path path(name);
  const bool inside = !name.empty() && path.is_relative() &&
                      std::none_of(path.begin(), path.end(), [](const auto& part) { return part == ".."; });
  if (!inside) fail("{}: state.json lists file '{}', expected a path inside the checkpoint directory", document, name);
  if (!is_count(bytes))
    fail("{}: state.json records {} bytes for '{}', expected a byte count", document, brief(bytes), name);
}

}  // namespace

nlohmann::json CheckpointState::to_json() const {
  nlohmann::json json{{"step", step},           {"config", config}, {"data", data}, {"optimizer", optimizer},
                      {"optimizer_steps", optimizer_steps}, {"ranks", ranks}};
  if (!mesh.empty()) json["mesh"] = mesh;
  if (batches) json["batches"] = *batches;
  if (batches || !bad_batches.empty()) json["bad_batches"] = bad_batches;
  if (saved_at) json["saved_at"] = *saved_at;
  if (!compression.empty()) json["compression"] = compression;
  if (!parameter_server.empty()) json["parameter_server"] = parameter_server;
  if (!files.empty()) json["files"] = files;
  if (!checksums.empty()) json["checksums"] = checksums;
  return json;
}

CheckpointState CheckpointState::from_json(const nlohmann::json& json, const std::string& document, bool on_disk) {
  if (!json.is_object()) fail("{}: state.json is {}, expected a JSON object", document, brief(json));
  const auto bad = [&](const std::string& key, std::string_view expected) {
    fail("{}: state.json's '{}' is {}, expected {}", document, key,
         json.contains(key) ? brief(json.at(key)) : "missing", expected);
  };
  if (on_disk && (!json.contains("files") || !json.at("files").is_object()))
    fail("{}: state.json lists no files (written by a parallax before sharded checkpoints?); its model.safetensors "
         "still loads for eval and sample",
         document);
  // Counts are non-negative integers: json_fields reads any integer.
  for (const char* key : {"step", "optimizer_steps"})
    if (!json.contains(key) || !is_count(json.at(key))) bad(key, "a non-negative integer");
  if (json.contains("batches") && !is_count(json.at("batches"))) bad("batches", "a non-negative integer");
  if (!json.contains("config") || !json.at("config").is_object()) bad("config", "the model config object");
  if (!json.contains("data")) bad("data", "the data order's state");
  if (json.contains("ranks") && !(is_count(json.at("ranks")) && json.at("ranks").get<uint64_t>() >= 1 &&
                                  json.at("ranks").get<uint64_t>() <= (1 << 20)))
    bad("ranks", "a rank count from 1 to 2^20");
  if (json.contains("bad_batches")) {
    const nlohmann::json& listed = json.at("bad_batches");
    if (!listed.is_array() || !std::all_of(listed.begin(), listed.end(), is_count))
      bad("bad_batches", "an array of batch numbers");
  }
  using json_fields::field;
  const std::string where = "state.json";
  CheckpointState s{
      .step = field<int64_t>(document, json, where, "step", 0),
      .config = json.at("config"),
      .data = json.at("data"),
      .optimizer = field<std::string>(document, json, where, "optimizer", ""),
      .optimizer_steps = field<int64_t>(document, json, where, "optimizer_steps", 0),
      .ranks = field<int>(document, json, where, "ranks", 1),
      .mesh = field<std::string>(document, json, where, "mesh", ""),
      .bad_batches = json.value("bad_batches", std::vector<int64_t>()),
      .compression = field<std::string>(document, json, where, "compression", ""),
      .parameter_server = field<std::string>(document, json, where, "parameter_server", "")};
  if (json.contains("batches")) s.batches = field<int64_t>(document, json, where, "batches", 0);
  if (json.contains("saved_at")) s.saved_at = field<double>(document, json, where, "saved_at", 0);
  if (json.contains("files")) {
    for (const auto& [name, bytes] : json.at("files").items()) {
      check_listed_file(document, name, bytes);
      s.files[name] = bytes.get<uint64_t>();
    }
  }
  if (json.contains("checksums")) {
    if (!json.at("checksums").is_object()) bad("checksums", "an object of shard file -> checksum");
    for (const auto& [name, sum] : json.at("checksums").items()) {
      if (!sum.is_number_unsigned() && !(sum.is_number_integer() && sum.get<int64_t>() >= 0))
        fail("{}: state.json records checksum {} for '{}', expected an unsigned 64-bit integer", document, brief(sum),
             name);
      if (!s.files.contains(name))
        fail("{}: state.json records a checksum for '{}', which its file list does not hold", document, name);
      s.checksums[name] = sum.get<uint64_t>();
    }
  }
  return s;
}

}  // namespace px
