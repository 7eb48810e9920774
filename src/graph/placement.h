// Placements of a tensor along one mesh axis (DESIGN.md): split along a
// tensor dim S(d), broadcast B (every rank holds it whole), or partial P
// (every rank holds a summand, or for P(max) a candidate of the maximum).
// An op's placement signature says which combination of input placements
// it can run on locally, and what placements its outputs then have: for
// Y = X·W, (S(0), B) -> S(0) is data parallel, (B, S(1)) -> S(1) column
// parallel, (S(1), S(0)) -> P row parallel.
//
// A split may be grouped: S(d,g) views dim d as g groups of n/g and splits
// every group in blocks, so a rank holds its block of each group. GPT's
// fused q|k|v projection is split this way: each rank gets its heads of q,
// of k and of v. Signatures of ops other than reshape never name groups:
// propagation carries the groups of a split input to the split outputs.
//
// A split may be zigzag: Z(d) cuts dim d into 2n blocks by core/block.h's
// rule and rank r of n holds blocks r and 2n-1-r, in that order. Context
// parallelism splits the sequence so, for causal balance: rank r's early
// tokens see few keys, its late ones many, so every rank's attention work
// is the same. Signatures name it only where they must (the ring's
// to_blocks/from_blocks); propagation carries it like groups.
#pragma once

#include <string>
#include <vector>

namespace px {

struct Placement {
  enum class Kind { split, broadcast, partial };
  enum class Reduce { sum, max };  // partial: how the ranks' terms combine
  Kind kind = Kind::broadcast;
  int dim = 0;     // split: the tensor dim, >= 0
  int groups = 1;  // split: dim d seen as `groups` groups, each split in blocks
  Reduce reduce = Reduce::sum;
  bool zigzag = false;  // split: dim d cut into 2n blocks, rank r holding r and 2n-1-r

  static Placement S(int dim, int groups = 1) { return {Kind::split, dim, groups, Reduce::sum}; }
  static Placement Z(int dim) { return {Kind::split, dim, 1, Reduce::sum, true}; }
  static Placement B() { return {Kind::broadcast, 0, 1, Reduce::sum}; }
  static Placement P(Reduce reduce = Reduce::sum) { return {Kind::partial, 0, 1, reduce}; }
  bool is_split() const { return kind == Kind::split; }
  bool is_partial() const { return kind == Kind::partial; }
  bool operator==(const Placement&) const = default;
  std::string str() const;  // "S(0)", "S(1,3)", "Z(1)", "B", "P", "P(max)"
};

// Parses what str() prints; px::Error naming the text otherwise.
Placement placement_from_string(const std::string& text);

struct PlacementSignature {
  std::string name;  // e.g. "data_parallel", "column_parallel"
  std::vector<Placement> inputs;
  std::vector<Placement> outputs;
  // Holds only when every split dim (of inputs and outputs) divides evenly
  // by the shard count: a reshape that splits heads with their channels
  // inside needs whole heads on every shard.
  bool even = false;
  // > 0: holds only on an axis of exactly this many ranks, its split dims
  // cut by core/block.h's rule (context parallelism's blocked layout: a
  // rank's tokens are exactly its block).
  int ranks = 0;
  // Along its split dim the ranks exchange blocks (ring_shift): the
  // lowering's transfers do it, not the kernel, which sees one block.
  bool exchanges = false;
  // Holds only on the expert axis (expert parallelism), where the rows a
  // node reads are the ones a routed exchange brought to this rank's
  // experts: the experts' weights split S(0) there, the rows' placement B
  // (each rank's rows are its own, not copies). Never chosen elsewhere.
  bool routed = false;
  bool operator==(const PlacementSignature&) const = default;
  std::string str() const;  // "data_parallel: (S(0), B) -> (S(0))"
};

}  // namespace px
