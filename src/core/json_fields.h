// Reading a JSON object of known, optional keys with errors that name the
// document, the field, its value and what was expected (strategies, cluster
// specs). `document` prefixes every message: "strategy", "cluster".
#pragma once

#include <set>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace px::json_fields {

// `json` must be an object whose keys are all in `known`.
inline void check_keys(const std::string& document, const nlohmann::json& json, const std::string& where,
                       const std::set<std::string>& known) {
  if (!json.is_object()) fail("{}: {} must be a JSON object, got {}", document, where, json.dump());
  for (const auto& [key, value] : json.items())
    if (!known.count(key)) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      fail("{}: {} has an unknown key '{}' (expected {})", document, where, key, list);
    }
}

// json[key] as a T, or `fallback` when absent.
template <typename T>
T field(const std::string& document, const nlohmann::json& json, const std::string& where, const std::string& key,
        T fallback) {
  if (!json.contains(key)) return fallback;
  try {
    return json.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: {}.{} is {}, expected a {}", document, where, key, json.at(key).dump(),
         std::is_same_v<T, std::string> ? "string" : std::is_same_v<T, bool> ? "boolean" : "number");
  }
}

}  // namespace px::json_fields
