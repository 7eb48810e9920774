// CostModel: the alpha-beta-gamma model that predicts a collective's time per
// algorithm, message size and group size, and picks the cheapest (what
// Algorithm::automatic runs). docs/collectives.md lists the same formulas.
//
//   volume = beta · bytes_sent + gamma · bytes_reduced
//   time   = fit.latency · alpha · messages
//          + (fit.bandwidth · cached + fit.memory · (1 - cached)) · volume
//   cached = 1 / (1 + (p · n / cache_bytes)^cache_cliff)   (per algorithm, fitted)
//
// alpha (s per message), beta (s per byte sent) and gamma (s per byte
// reduced) are per link class, measured in cache: `transport` for
// point-to-point messages, `shared_memory` for the staging segment. `cached`
// is the share of the traffic served by the last-level cache, which all
// ranks of a host share; past it each byte costs fit.memory instead of
// fit.bandwidth. `parallax bench comm --tune` measures the link parameters,
// the cache's effective size and cliff on this host, and each algorithm's
// factors `fit` (default 1, 1, 2.5); the result is saved as JSON.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "comm/collectives.h"

namespace px::comm {

struct LinkCost {
  double alpha = 5e-6;   // s per message (latency)
  double beta = 2.5e-10; // s per byte sent (inverse bandwidth)
  double gamma = 1e-10;  // s per byte reduced
  bool operator==(const LinkCost&) const = default;
};

// Per-algorithm factors fitted by --tune: what the algorithm's implementation
// adds to the link's cost (extra copies, synchronization, poorer overlap).
struct AlgorithmFit {
  double latency = 1.0;    // x alpha · messages
  double bandwidth = 1.0;  // x volume while the working set is in cache
  double memory = 2.5;     // x volume once it has left the cache (2-3x on this host class)
  // Where this algorithm's traffic leaves the cache (0: the model's): its
  // working set is p · n plus its own scratch, so the cliff sits apart per algorithm.
  double cache_bytes = 0;
  double cache_cliff = 0;
  bool operator==(const AlgorithmFit&) const = default;
};

struct CostModel {
  std::string backend = "inproc";  // what the parameters were measured on
  LinkCost transport;
  LinkCost shared_memory{.alpha = 1e-6, .beta = 1e-10, .gamma = 1e-10};
  double cache_bytes = 32 << 20;  // effective last-level cache (L3 here)
  double cache_cliff = 2;         // how sharply traffic leaves the cache past it
  // "<collective>/<algorithm>/<ranks>" -> fit; absent = defaults.
  std::map<std::string, AlgorithmFit> fits;
  bool operator==(const CostModel&) const = default;
};

// What one algorithm costs in model units for n bytes over p ranks.
struct CostTerms {
  double messages = 0;       // latency-bound steps on the busiest rank
  double bytes_sent = 0;     // bytes the busiest rank sends
  double bytes_reduced = 0;  // bytes the busiest rank reduces
  bool shared_memory = false;  // uses the shared-memory link class
};

struct CostQuery {
  Collective collective = Collective::allreduce;
  Algorithm algorithm = Algorithm::ring;
  double bytes = 0;  // the collective's n (allreduce/reduce-scatter/allgather: whole buffer)
  int ranks = 1;
  int servers = 0;         // sharded_parameter_server
  int ranks_per_node = 0;  // hierarchical (0: all on one node)
};

CostTerms cost_terms(const CostQuery& query);
// Share (0..1) of the traffic served from cache for the query's working set.
double cached_share(const CostModel& model, const CostQuery& query);
double predicted_seconds(const CostModel& model, const CostQuery& query);
std::string fit_key(Collective collective, Algorithm algorithm, int ranks);

// Built-in guesses for this class of host, before any --tune.
CostModel default_cost_model(std::string_view backend);

// JSON (de)serialization; load throws px::Error naming the file on bad input.
std::string cost_model_to_json(const CostModel& model);
CostModel cost_model_from_json(const std::string& text, std::string_view origin);
void save_cost_model(const CostModel& model, const std::string& path);
CostModel load_cost_model(const std::string& path);

}  // namespace px::comm
