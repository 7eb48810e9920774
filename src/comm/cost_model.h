// CostModel: the alpha-beta-gamma model that predicts a collective's time per
// algorithm, message size and group size, and picks the cheapest (what
// Algorithm::automatic runs). docs/collectives.md lists the same formulas.
//
//   time = fit.latency · alpha · messages
//        + fit.bandwidth · (beta · bytes_sent + gamma · bytes_reduced)
//        + fit.memory · (beta · bytes_sent + gamma · bytes_reduced) · n / (n + cache_bytes)
//
// alpha (s per message), beta (s per byte sent) and gamma (s per byte
// reduced) are per link class: `transport` for point-to-point messages,
// `shared_memory` for the staging segment. `parallax bench comm --tune`
// measures them on this host and fits per-algorithm factors `fit` (default 1,
// 1, 0) to measured times; the result is saved as JSON and loaded later.
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

// Per-algorithm correction fitted by --tune.
struct AlgorithmFit {
  double latency = 1.0;
  double bandwidth = 1.0;
  double memory = 0.0;  // extra bandwidth term once the working set leaves cache
  bool operator==(const AlgorithmFit&) const = default;
};

struct CostModel {
  std::string backend = "inproc";  // what the parameters were measured on
  LinkCost transport;
  LinkCost shared_memory{.alpha = 1e-6, .beta = 1e-10, .gamma = 1e-10};
  double cache_bytes = 32 << 20;  // L3: beyond it the memory term grows
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
