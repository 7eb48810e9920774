#include "graph/placement.h"

#include <fmt/format.h>

namespace px {

std::string Placement::str() const {
  switch (kind) {
    case Kind::split: return fmt::format("S({})", dim);
    case Kind::broadcast: return "B";
    case Kind::partial: return "P";
  }
  return "?";
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
