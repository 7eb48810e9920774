// Reading a JSON object of known, optional keys with errors that name the
// document, the field, its value and what was expected (strategies, cluster
// specs). `document` prefixes every message: "strategy", "cluster".
#pragma once

#include <cstdint>
#include <limits>
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
  const nlohmann::json& value = json.at(key);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    static_assert(std::is_signed_v<T>, "json_fields::field reads signed integers");
    // An integer in T's range: nlohmann's get<int>() of 1e300 or 2^40 would
    // convert out of range (undefined, or a wrapped value) instead of failing.
    const bool fits = value.is_number_unsigned()  ? value.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
                      : value.is_number_integer() ? value.get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
                                                        value.get<int64_t>() <= int64_t(std::numeric_limits<T>::max())
                                                  : false;
    if (!fits)
      fail("{}: {}.{} is {}, expected an integer from {} to {}", document, where, key, value.dump(),
           std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    return value.get<T>();
  }
  try {
    return value.get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: {}.{} is {}, expected a {}", document, where, key, value.dump(),
         std::is_same_v<T, std::string> ? "string" : std::is_same_v<T, bool> ? "boolean" : "number");
  }
}

}  // namespace px::json_fields
