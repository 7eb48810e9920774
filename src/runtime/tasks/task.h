// A training task: a model family and its data. The trainer is the same
// loop for every task; a task builds graphs for a batch size, serves global
// training batches, evaluates, and saves/restores where its data order is.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "nn/build_model.h"
#include "nn/model.h"
#include "parallel/row_split.h"
#include "runtime/state/param_store.h"

namespace px {

// The data a task serves: the tasks room's part of a job.
struct DataOptions {
  std::string path;        // text file (gpt) or IDX directory (mlp/cnn); empty: the default corpus
  int64_t batch = 16;      // global batch
  // Classifiers: leave out each epoch's last batch when it is partial
  // (fewer than `batch` rows); by default it trains (PyTorch's drop_last=False).
  bool drop_last = false;
  int64_t eval_batches = 20;  // validation batches (mlp/cnn: of 1000 test images)
  bool operator==(const DataOptions&) const = default;
};

// px::Error naming the bad option: a batch or evaluation of no rows.
void validate(const DataOptions& data);

struct DataBatch {
  Tensor inputs;   // (rows, ...) images f32 or tokens i32
  Tensor targets;  // (rows) labels or (rows, T) next tokens, i32
  // Rows of the global batch these are (a rank's shard of): the batch
  // size, or fewer for an epoch's partial last batch.
  int64_t global_rows = 0;
  int64_t rows() const { return inputs.dim(0); }
};

// A batch as the executor's feeds (nn::batch_input_names names them).
std::vector<std::pair<ValueId, Tensor>> feeds_of(const nn::Model& model, const DataBatch& batch);

struct Evaluation {
  double loss = 0;
  double accuracy = -1;  // classifiers only
};

// A part of an evaluation: sums over the validation batches one part
// took (Task::evaluate's run of them), so every rank's parts add up to the
// whole evaluation, whatever the number of parts.
struct EvaluationSums {
  double loss = 0;      // Σ batch mean loss x its weight
  double weight = 0;    // Σ weights: rows (classifiers) or batches (text)
  double correct = -1;  // classifiers: rows predicted right (-1: no accuracy)
  Evaluation mean() const { return {loss / weight, correct < 0 ? -1 : correct / weight}; }
};

class Task {
 public:
  virtual ~Task() = default;
  virtual nn::Model build(int64_t batch, bool training) const = 0;
  // Rank `rank`'s rows of the next global batch under `split`
  // (parallel/row_split.h); every rank makes the same calls, so all advance
  // through the data alike.
  virtual DataBatch next_batch(const parallel::RowSplit& split, int rank) = 0;
  // Batches in one epoch (classifiers), 0 when training is counted in steps only.
  virtual int64_t steps_per_epoch() const { return 0; }
  // Part `part` of the validation batches under `split` (the batches as
  // rows: a contiguous run of them, by the split's shares, so ranks of
  // different speeds each evaluate as many as they compute in the time;
  // data-parallel ranks each evaluate a part at once and the sums add up).
  // The defaults: every batch.
  virtual EvaluationSums evaluate(const ParamStore& params, const parallel::RowSplit& split = {}, int part = 0) = 0;
  virtual nlohmann::json data_state() const = 0;
  virtual void restore_data_state(const nlohmann::json& state) = 0;
  // What one row of a batch is, for throughput: "tok" (T tokens a row) or "img".
  virtual const char* unit() const = 0;
  virtual int64_t units_per_row() const = 0;
};

// A model's starting parameters: every one drawn from its ParamInit with
// one Rng(seed) (ParamStore::initialize), then the values the model brings
// itself (ParamInit::values: an imported ONNX model's initializers) copied
// over the draws. Every rank calls it alike and gets the same store.
ParamStore initial_parameters(const Graph& graph, uint64_t seed);

// The task that trains `model` on `data`, its data order drawn from
// `seed`, evaluating in `precision` (the run's). Loads the data (px::Error
// for missing or bad data).
std::unique_ptr<Task> make_task(const nn::ModelConfig& model, const DataOptions& data, uint64_t seed,
                                Precision precision = Precision::fp32);

}  // namespace px
