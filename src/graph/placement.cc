#include "graph/placement.h"

#include <cstdio>

#include <fmt/format.h>

#include "core/error.h"

namespace px {

std::string Placement::str() const {
  switch (kind) {
    case Kind::split:
      if (zigzag) return fmt::format("Z({})", dim);
      return groups == 1 ? fmt::format("S({})", dim) : fmt::format("S({},{})", dim, groups);
    case Kind::broadcast: return "B";
    case Kind::partial: return reduce == Reduce::max ? "P(max)" : "P";
  }
  return "?";
}

Placement placement_from_string(const std::string& text) {
  if (text == "B") return Placement::B();
  if (text == "P" || text == "P(sum)") return Placement::P();
  if (text == "P(max)") return Placement::P(Placement::Reduce::max);
  int dim = -1, groups = 1;
  char close = 0, tail = 0;
  if (std::sscanf(text.c_str(), "S(%d%c%c", &dim, &close, &tail) == 2 && close == ')' && dim >= 0)
    return Placement::S(dim);
  if (std::sscanf(text.c_str(), "Z(%d%c%c", &dim, &close, &tail) == 2 && close == ')' && dim >= 0)
    return Placement::Z(dim);
  if (std::sscanf(text.c_str(), "S(%d,%d%c%c", &dim, &groups, &close, &tail) == 3 && close == ')' && dim >= 0 &&
      groups >= 1)
    return Placement::S(dim, groups);
  fail("placement '{}' is not one of S(d), S(d,groups), Z(d) with d >= 0 and groups >= 1, B, P or P(max)", text);
}

static std::string join(const std::vector<Placement>& ps) {
  std::string out;
  for (const auto& p : ps) out += (out.empty() ? "" : ", ") + p.str();
  return out;
}

std::string PlacementSignature::str() const {
  return fmt::format("{}: ({}) -> ({})", name, join(inputs), join(outputs));
}

}  // namespace px
