#include "comm/compression/spec.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"

namespace px::comm::compression {
namespace {

constexpr std::string_view kGrammar =
    "expected none, fp16, bf16, int8, sign, topk:FRACTION, threshold:VALUE or powersgd:RANK, "
    "optionally followed by ,ef=on or ,ef=off";

template <typename T>
bool parse_number(std::string_view text, T& value) {
  if (text.empty()) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::string_view method_name(Method method) {
  switch (method) {
    case Method::none: return "none";
    case Method::fp16: return "fp16";
    case Method::bf16: return "bf16";
    case Method::int8: return "int8";
    case Method::sign: return "sign";
    case Method::topk: return "topk";
    case Method::threshold: return "threshold";
    case Method::powersgd: return "powersgd";
  }
  return "?";
}

Spec Spec::parse(std::string_view text) {
  Spec spec;
  std::string_view body = text;
  if (size_t comma = text.find(','); comma != std::string_view::npos) {
    std::string_view option = text.substr(comma + 1);
    body = text.substr(0, comma);
    if (option == "ef=on") spec.error_feedback = true;
    else if (option == "ef=off") spec.error_feedback = false;
    else fail("compression '{}': unknown option '{}'; {}", text, option, kGrammar);
  }
  std::string_view name = body, parameter;
  const size_t colon = body.find(':');
  if (colon != std::string_view::npos) {
    name = body.substr(0, colon);
    parameter = body.substr(colon + 1);
  }
  bool found = false;
  for (Method method : {Method::none, Method::fp16, Method::bf16, Method::int8, Method::sign,
                        Method::topk, Method::threshold, Method::powersgd})
    if (name == method_name(method)) {
      spec.method = method;
      found = true;
    }
  if (!found) fail("compression '{}': unknown method '{}'; {}", text, name, kGrammar);

  const bool takes_parameter = spec.method == Method::topk || spec.method == Method::threshold ||
                               spec.method == Method::powersgd;
  if (!takes_parameter) {
    if (colon != std::string_view::npos)
      fail("compression '{}': {} takes no parameter; {}", text, name, kGrammar);
    return spec;
  }
  switch (spec.method) {
    case Method::topk:
      if (!parse_number(parameter, spec.topk_fraction) || !(spec.topk_fraction > 0) ||
          spec.topk_fraction > 1)
        fail("compression '{}': top-k fraction '{}' is not a number in (0, 1] (e.g. topk:0.01)",
             text, parameter);
      break;
    case Method::threshold:
      if (!parse_number(parameter, spec.threshold) || !(spec.threshold > 0) ||
          !std::isfinite(spec.threshold))
        fail("compression '{}': threshold '{}' is not a finite number > 0 (e.g. threshold:1e-3)",
             text, parameter);
      break;
    default:  // powersgd
      if (!parse_number(parameter, spec.rank) || spec.rank < 1)
        fail("compression '{}': PowerSGD rank '{}' is not an integer >= 1 (e.g. powersgd:2)",
             text, parameter);
      break;
  }
  return spec;
}

std::string Spec::to_string() const {
  std::string text(method_name(method));
  if (method == Method::topk) text += fmt::format(":{}", topk_fraction);
  if (method == Method::threshold) text += fmt::format(":{}", threshold);
  if (method == Method::powersgd) text += fmt::format(":{}", rank);
  if (!error_feedback) text += ",ef=off";
  return text;
}

}  // namespace px::comm::compression
