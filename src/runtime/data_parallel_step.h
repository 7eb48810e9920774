// One training step's forward and backward on this rank's rows of the global
// batch, with the gradients reduced across the data-parallel group: the
// executor for a lowered data-parallel Program (parallel/lower.h).
//
// The global graph is built once for the global batch (so the loss carries
// the global scale 1/rows and every shard's loss and gradients are summands
// of the global ones); lowering gives a local program per distinct local
// micro-batch size. Gradients land in one flat arena, bucket by bucket in the
// order backward produces them; on the last micro-batch each bucket is
// reduced as soon as it is complete. ZeRO-2 keeps no arena: each bucket's
// gradients are gathered in a bucket buffer that lives until the bucket's
// reduce-scatter has run (every micro-batch), so only this rank's shard of
// the gradients persists.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/compression/compressor.h"
#include "comm/engine/comm_engine.h"
#include "graph/executor.h"
#include "nn/model.h"
#include "parallel/lower.h"
#include "runtime/param_store.h"
#include "runtime/task.h"
#include "runtime/sharded_optimizer.h"
#include "runtime/trace.h"

namespace px {

struct StepResult {
  double loss = 0;  // global (summed over every rank's rows)
  int64_t peak_bytes = 0;
  // This rank's gradient bytes handed to the transport this step, and what a
  // float32 ring allreduce of the same gradients sends (2(p-1)/p * 4n).
  comm::compression::WireStats wire;
};

class DataParallelStep {
 public:
  // `group` is the data-parallel communicator (nullptr: one rank). `global`
  // is the model built for the global batch of `global_rows` rows.
  // `trace`: keep compute and communication timings (take_trace) for the
  // steps run with tracing on (set_tracing).
  DataParallelStep(nn::Model global, int64_t global_rows, comm::Communicator* group,
                   parallel::GradientSyncOptions sync, bool trace = false);
  ~DataParallelStep();

  // Forward + backward over this rank's rows (`rows` starts at global row
  // `row_offset`), split into `accumulation` micro-batches, then the
  // gradient reduction. `seed` is the step's seed (dropout masks depend on
  // seed and global row, so any split draws the same masks).
  // `before_param_read(name)`, if given, is called before any node reads
  // that parameter (P3: the caller finishes the parameter's update there).
  StepResult run(const ParamStore& params, const DataBatch& rows, int64_t row_offset, int accumulation,
                 uint64_t seed, uint64_t step,
                 const std::function<void(const std::string&)>& before_param_read = {});
  // P3: whether run() returns with reductions in flight; then wait for a
  // gradient before using it, and finish() before anything reads them all.
  bool deferred() const { return strategy_.sync.p3_slice_bytes > 0 && engine_ != nullptr; }
  void wait_gradient(const std::string& name);
  void finish();

  // ZeRO-1 and -2 (sync.zero_stage 1 or 2, more than one rank): run()
  // reduce-scatters every bucket, so this rank holds the summed gradients of
  // its shard only: block(bucket, p, rank) of every bucket, concatenated.
  // ZeRO-1 reduces once per step from the full arena; ZeRO-2 reduces every
  // micro-batch's buckets as they fill and adds into the shard.
  bool sharded() const;
  bool sharded_gradients() const { return sharded() && strategy_.sync.zero_stage >= 2; }
  std::span<float> grad_shard() { return {grad_shard_.f32(), static_cast<size_t>(grad_shard_.numel())}; }
  // The parameter runs making up this rank's shard (decay: per parameter name).
  std::vector<ShardPiece> shard_pieces(const std::map<std::string, bool>& decay);
  int64_t shard_count();
  // Collective: every rank's updated shard of the parameters into `params`.
  void gather_params(ParamStore& params);
  // Collective: the full optimizer state, by "<param>.<slot>" (for checkpoints).
  NamedTensors gather_state(const ShardedOptimizer& optimizer, const std::vector<std::string>& slot_names);

  // Compressed gradients: every rank's error-feedback state (residuals,
  // PowerSGD's Q, DGC velocities) as "rank<r>.<param>.<entry>", for a
  // checkpoint. Collective; empty without compression.
  NamedTensors gather_compression_state();
  // This rank's entries of a state saved at the same rank count with the
  // same compression; px::Error names a missing or mis-sized entry.
  void load_compression_state(const SafetensorsFile& file);
  bool compressing() const { return !compressors_.empty(); }

  // The reduced gradients by parameter name, identical on every rank
  // (views into the arena, valid until the next run; empty under ZeRO-2).
  std::map<std::string, Tensor>& grads() { return grads_; }

  // Gradient memory on this rank: what persists between steps (the full
  // arena, or under ZeRO-2 the shard) and, under ZeRO-2, the most bucket
  // buffer bytes alive at once (at most sync.bucket_buffers buckets).
  struct GradientMemory {
    int64_t stored_bytes = 0;
    int64_t buffer_peak_bytes = 0;
    int64_t elements = 0;  // of the whole model's gradients
  };
  GradientMemory gradient_memory();
  const parallel::Strategy& strategy() const { return strategy_; }
  void set_tracing(bool on) { tracing_ = on && trace_; }
  std::vector<TraceRecord> take_trace() { return std::move(trace_records_); }

 private:
  struct Local;  // a lowered program and its executor, per micro-batch rows
  Local& local_for(int64_t rows);
  // Every local program shares one gradient layout (lowering is deterministic).
  const parallel::Program& layout() const;
  std::span<float> bucket_span(int bucket);
  // ZeRO-2: where gradient `gs` goes in its bucket's buffer (acquired if the
  // bucket has none yet, after freeing, or waiting for, reduced buffers);
  // marking it final reduce-scatters every bucket that is now complete, in
  // bucket order (accumulate: add into the shard instead of overwriting it).
  float* bucket_buffer_slot(const parallel::GradientSync& gs);
  void sharded_gradient_ready(int index, bool accumulate, uint64_t step);
  void reduce_scatter_bucket(int bucket, bool accumulate, uint64_t step);
  // Frees the reduced buffers whose reduce-scatter is done (first waiting for
  // the oldest one's, when `wait_oldest`).
  void release_finished_buffers(bool wait_oldest);
  // Overlap: marks gradient `index` final; submits, in bucket order, every
  // bucket that is now complete (so every rank submits the same jobs in the
  // same order).
  void gradient_ready(int index);
  // Compression: gradient `index` is final; exchanges it (on the engine
  // when overlapping) through its compressor.
  void compress_and_reduce(int index, uint64_t step);
  // This rank's compression state, by entry name (gradient order).
  comm::compression::GradientCompressor::State compression_state() const;

  nn::Model global_;
  std::vector<std::pair<ValueId, ValueId>> param_grads_;
  comm::Communicator* group_;
  parallel::Strategy strategy_;
  std::map<int64_t, std::unique_ptr<Local>> locals_;
  Tensor arena_;
  std::map<std::string, Tensor> grads_;
  std::unique_ptr<comm::CommEngine> engine_;  // overlap on, more than one rank
  std::vector<int> missing_;                  // per bucket: gradients not yet final this step
  int next_bucket_ = 0;                       // first bucket not yet submitted
  std::vector<comm::compression::GradientCompressor> compressors_;  // per gradient (layout order)
  std::vector<comm::compression::WireStats> wire_;                  // per gradient, this step
  std::vector<comm::CommEngine::JobId> jobs_;  // per bucket, this step
  std::map<std::string, int> bucket_of_;       // parameter name -> bucket
  void collect_engine_trace(uint64_t step);
  std::vector<std::vector<float>> velocity_;  // per gradient: local momentum (sync.local_momentum)
  struct ShardBlock {  // this rank's block of one bucket
    int64_t arena_offset = 0, count = 0, shard_offset = 0;
  };
  std::vector<ShardBlock> shard_blocks_;  // per bucket (ZeRO)
  Tensor grad_shard_;  // a Tensor, so the memory tracker counts it
  int64_t arena_count_ = 0;  // elements of the gradient layout
  // ZeRO-2 bucket buffers: being filled (by bucket), and handed to a
  // reduce-scatter (oldest first; freed once its job is done).
  struct InFlightBuffer {
    Tensor buffer;
    comm::CommEngine::JobId job = -1;
  };
  std::map<int, Tensor> filling_;
  std::deque<InFlightBuffer> reducing_;
  int64_t buffer_bytes_live_ = 0, buffer_bytes_peak_ = 0;
  // Fills `arena` (arena layout) from every rank's blocks; this rank's are set.
  void allgather_arena(std::vector<float>& arena);
  bool trace_ = false, tracing_ = false;
  bool trace_deferred_ = false;  // P3: this step's reductions are traced when waited for
  bool in_flight_ = false;       // P3: the last run() returned with reductions running
  uint64_t trace_step_ = 0;
  std::vector<TraceRecord> trace_records_;
  std::vector<Executor::NodeTiming> timings_;
};

}  // namespace px
