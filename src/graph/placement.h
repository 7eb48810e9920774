// Placements of a tensor along one mesh axis (DESIGN.md): split along a
// tensor dim S(d), broadcast B (every rank holds it whole), or partial P
// (every rank holds a summand). An op's placement signature says which
// combination of input placements it can run on locally, and what placements
// its outputs then have: for Y = X·W, (S(0), B) -> S(0) is data parallel,
// (B, S(1)) -> S(1) column parallel, (S(1), S(0)) -> P row parallel.
#pragma once

#include <string>
#include <vector>

namespace px {

struct Placement {
  enum class Kind { split, broadcast, partial };
  Kind kind = Kind::broadcast;
  int dim = 0;  // for split: the tensor dim, >= 0

  static Placement S(int dim) { return {Kind::split, dim}; }
  static Placement B() { return {Kind::broadcast, 0}; }
  static Placement P() { return {Kind::partial, 0}; }
  bool is_split() const { return kind == Kind::split; }
  bool operator==(const Placement&) const = default;
  std::string str() const;  // "S(0)", "B", "P"
};

struct PlacementSignature {
  std::string name;  // e.g. "data_parallel", "column_parallel"
  std::vector<Placement> inputs;
  std::vector<Placement> outputs;
  bool operator==(const PlacementSignature&) const = default;
  std::string str() const;  // "data_parallel: (S(0), B) -> (S(0))"
};

}  // namespace px
