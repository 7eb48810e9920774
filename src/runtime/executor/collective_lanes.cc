#include "runtime/executor/collective_lanes.h"

#include <fmt/format.h>

#include "comm/collectives.h"
#include "core/error.h"
#include "kernels/bf16.h"
#include "kernels/elementwise.h"
#include "parallel/memory_ledger.h"

namespace px {

namespace {

// The slice size the lane's collectives name (P3; 0: whole). The engine
// cuts every job alike, so they must agree.
int64_t slice_bytes(const parallel::Program& program, const std::vector<int>& lane_of, int lane) {
  int64_t bytes = 0;
  for (size_t i = 0; i < program.instrs.size(); ++i) {
    const auto* c = std::get_if<parallel::Collective>(&program.instrs[i].op);
    if (c == nullptr || lane_of[i] != lane || c->slice_bytes == 0) continue;
    PX_CHECK(bytes == 0 || bytes == c->slice_bytes, "progress-lane collectives in slices of {} and {} bytes", bytes,
             c->slice_bytes);
    bytes = c->slice_bytes;
  }
  return bytes;
}

}  // namespace

CollectiveLanes::CollectiveLanes(const parallel::Program& program, RankGroups& groups,
                                 const parallel::ExecutionOptions& options) {
  if (options.overlap) lane_of_ = lanes_of(program, groups, lanes_);
  else lane_of_.assign(program.instrs.size(), -1);
  for (size_t l = 0; l < lanes_.size(); ++l) {
    comm::EngineOptions engine;
    engine.collective = program.collective;
    engine.slice_bytes = slice_bytes(program, lane_of_, static_cast<int>(l));
    engine.trace = options.trace;
    lanes_[l].engine = std::make_unique<comm::CommEngine>(*lanes_[l].group, engine);
  }
  job_.assign(program.instrs.size(), -1);
}

std::vector<int> CollectiveLanes::lanes_of(const parallel::Program& program, RankGroups& groups,
                                           std::vector<Lane>& lanes) {
  std::vector<int> lane_of(program.instrs.size(), -1);
  for (size_t i = 0; i < program.instrs.size(); ++i) {
    const parallel::Instr& instr = program.instrs[i];
    if (instr.lane.kind != parallel::Lane::Kind::progress || instr.group < 0) continue;
    comm::Communicator* group = groups.communicator_of(program, instr);
    if (group == nullptr || group->size() == 1) continue;  // nothing to overlap
    size_t l = 0;
    while (l < lanes.size() && lanes[l].axis != instr.lane.axis) ++l;
    if (l == lanes.size()) lanes.push_back({.axis = instr.lane.axis, .group = group, .engine = nullptr});
    PX_CHECK(lanes[l].group == group, "'{}': the progress lane of axis {} runs on two groups", instr.name,
             instr.lane.axis);
    lane_of[i] = static_cast<int>(l);
  }
  return lane_of;
}

void CollectiveLanes::bind(const parallel::Program& program, RankGroups& groups) {
  std::vector<int> lane_of(program.instrs.size(), -1);
  if (!lanes_.empty()) {
    std::vector<Lane> lanes;
    lane_of = lanes_of(program, groups, lanes);
    // The other program's lane l is this run's lane `same[l]`.
    std::vector<int> same(lanes.size(), -1);
    for (size_t l = 0; l < lanes.size(); ++l)
      for (size_t k = 0; k < lanes_.size(); ++k)
        if (lanes_[k].axis == lanes[l].axis && lanes_[k].group == lanes[l].group) same[l] = static_cast<int>(k);
    for (size_t l = 0; l < lanes.size(); ++l)
      if (same[l] < 0)
        fail("executor: the program for a batch of {} rows overlaps collectives on axis {}, the run's first does not",
             program.global_rows, lanes[l].axis);
    for (int& l : lane_of)
      if (l >= 0) l = same[static_cast<size_t>(l)];
  }
  lane_of_ = std::move(lane_of);
  job_.assign(program.instrs.size(), -1);
}

void CollectiveLanes::begin_step(const std::vector<bool>& carried, bool keep_carried) {
  for (size_t i = 0; i < job_.size(); ++i)
    if (!(keep_carried && carried[i])) job_[i] = -1;
}

bool CollectiveLanes::finished(int id) const {
  return has_job(id) && engine_of(id).finished(job_[static_cast<size_t>(id)]);
}

void CollectiveLanes::wait(int id) {
  if (has_job(id)) engine_of(id).wait(job_[static_cast<size_t>(id)]);
}

void CollectiveLanes::wait_all() {
  for (Lane& lane : lanes_) lane.engine->wait_all();
}

uint64_t CollectiveLanes::bytes_sent(int axis) const {
  uint64_t bytes = 0;
  for (const Lane& lane : lanes_)
    if (lane.axis == axis) bytes += lane.engine->bytes_sent();
  return bytes;
}

comm::CollectiveOptions options_of(const parallel::Program& program, const parallel::Instr& instr, comm::Collective kind) {
  comm::CollectiveOptions options = comm::options_for(program.collective, kind);
  if (instr.algorithm != comm::Algorithm::automatic) options.algorithm = instr.algorithm;
  return options;
}

bool CollectiveLanes::run(const parallel::Program& program, int id, const parallel::Collective& op,
                          BufferPool& buffers, comm::Communicator& group,
                          std::function<void(comm::Communicator&)> exchange) {
  std::span<float> input(buffers.data(op.input), static_cast<size_t>(op.input.count));
  if (exchange) return submit(program, id, std::move(exchange), group, static_cast<int64_t>(input.size() * sizeof(float)));
  const parallel::Instr& instr = program.instrs[static_cast<size_t>(id)];
  const int lane = lane_of_[static_cast<size_t>(id)];
  const comm::Buffer output = op.output.buffer >= 0 ? buffers.comm_buffer(op.output) : comm::Buffer();
  const JobId job = job_[static_cast<size_t>(id)] = dense(op, instr, options_of(program, instr, op.kind), input, output,
                                                          lane, parallel::gather_staging_bytes(program, op) > 0, group);
  if (lane >= 0) instr_of_job_[{lane, job}] = id;
  return lane >= 0;
}

bool CollectiveLanes::submit(const parallel::Program& program, int id, std::function<void(comm::Communicator&)> work,
                             comm::Communicator& group, int64_t bytes) {
  const parallel::Instr& instr = program.instrs[static_cast<size_t>(id)];
  const int lane = lane_of_[static_cast<size_t>(id)];
  if (lane < 0) {
    work(group);
    return false;
  }
  // Named alike on every rank (the engine's contract): the event's name, not the instruction's.
  const std::string name = instr.name.empty() ? program.event_name(static_cast<size_t>(id)) : instr.name;
  const JobId job = job_[static_cast<size_t>(id)] =
      lanes_[static_cast<size_t>(lane)].engine->submit(instr.priority, name, std::move(work), bytes);
  instr_of_job_[{lane, job}] = id;
  return true;
}

// A plain collective: queued on lane `lane`'s engine (its job), or run
// here (-1) when `lane` is -1; `staged`: an allgather from a copy of its input.
CollectiveLanes::JobId CollectiveLanes::dense(const parallel::Collective& op, const parallel::Instr& instr,
                                              const comm::CollectiveOptions& collective, std::span<float> input,
                                              comm::Buffer output, int lane, bool staged, comm::Communicator& group) {
  comm::CommEngine* engine = lane >= 0 ? lanes_[static_cast<size_t>(lane)].engine.get() : nullptr;
  const std::string& name = instr.name;
  const int priority = instr.priority;
  const comm::Algorithm algorithm = instr.algorithm;
  const int64_t bytes = static_cast<int64_t>(input.size() * sizeof(float));
  switch (op.kind) {
    case comm::Collective::allreduce:
      if (engine) return engine->allreduce(input, priority, name, op.op, algorithm);
      comm::allreduce(group, input, op.op, collective);
      return -1;
    case comm::Collective::reduce_scatter: {
      PX_CHECK(output.dtype == DType::f32, "'{}': a reduction into a {} buffer", name, dtype_name(output.dtype));
      const std::span<float> reduced(static_cast<float*>(output.data), static_cast<size_t>(output.count));
      if (!op.accumulate) {
        if (engine) return engine->reduce_scatter(input, reduced, priority, name, op.op, algorithm);
        comm::reduce_scatter(group, input.data(), output, static_cast<int64_t>(input.size()), op.op, collective);
        return -1;
      }
      // A later micro-batch adds its reduced block into the shard.
      auto reduce_and_add = [input, output = reduced, collective, reduction = op.op](comm::Communicator& comm) {
        std::vector<float> part(output.size());
        comm::reduce_scatter(comm, input.data(), comm::Buffer(std::span<float>(part)),
                             static_cast<int64_t>(input.size()), reduction, collective);
        kernels::add_inplace(static_cast<int64_t>(part.size()), part.data(), output.data());
      };
      if (engine) return engine->submit(priority, name, reduce_and_add, bytes);
      reduce_and_add(group);
      return -1;
    }
    case comm::Collective::allgather: {
      // From where the input is, unless it must be staged (the memory
      // ledger's rule: parallel::gather_staging_bytes).
      if (!staged) {
        if (!engine) {
          comm::allgather(group, input.data(), output, collective);
          return -1;
        }
        return engine->allgather(input, std::span<float>(static_cast<float*>(output.data), static_cast<size_t>(output.count)),
                                 priority, name, algorithm);
      }
      // Gathered from a copy in the output's dtype (a bf16 bucket's rounded
      // here, so the wire carries half the bytes), kept until the job is
      // done (release_staging).
      Tensor copy = Tensor::empty({static_cast<int64_t>(input.size())}, output.dtype);
      if (output.dtype == DType::bf16)
        kernels::to_bf16(copy.numel(), input.data(), static_cast<kernels::bf16*>(copy.raw()));
      else
        std::copy(input.begin(), input.end(), copy.f32());
      if (!engine) {
        comm::allgather(group, copy.raw(), output, collective);
        return -1;
      }
      const JobId job =
          output.dtype == DType::f32
              ? engine->allgather(std::span<const float>(copy.f32(), input.size()),
                                  std::span<float>(static_cast<float*>(output.data), static_cast<size_t>(output.count)),
                                  priority, name, algorithm)
              : engine->submit(
                    priority, name,
                    [in = copy.raw(), output, collective](comm::Communicator& comm) {
                      comm::allgather(comm, in, output, collective);
                    },
                    static_cast<int64_t>(output.bytes()));
      staging_[{lane, job}] = std::move(copy);
      return job;
    }
    default:
      fail("executor: collective {} ('{}') has no executor (allreduce, reduce-scatter and allgather do)",
           comm::collective_name(op.kind), name);
  }
}

void CollectiveLanes::collect(std::vector<TraceRecord>* trace, int64_t step) {
  // The jobs done before the traces are taken: their last slice's event is
  // in them (an engine records it before it marks the job done). A job
  // that finishes while they are taken keeps its name for the next
  // collect, which takes its event.
  std::vector<std::pair<int, JobId>> finished;
  for (const auto& entry : instr_of_job_)
    if (done(entry.first)) finished.push_back(entry.first);
  for (size_t l = 0; l < lanes_.size(); ++l) {
    comm::CommEngine& engine = *lanes_[l].engine;
    const int lane = static_cast<int>(l);
    std::vector<comm::TraceEvent> events = engine.take_trace();
    if (trace != nullptr)
      for (const comm::TraceEvent& e : events) {
        auto it = instr_of_job_.find({lane, e.job});
        trace->push_back({.name = e.slices > 1 ? fmt::format("{} [{}/{}]", e.name, e.slice + 1, e.slices) : e.name,
                          .lane = TraceRecord::Lane::progress,
                          .start_us = e.start_us,
                          .duration_us = e.duration_us,
                          .bytes = e.bytes,
                          .step = step,
                          .instr = it == instr_of_job_.end() ? -1 : it->second});
      }
  }
  // Job names go once their jobs are done.
  release_staging();
  for (const auto& job : finished) instr_of_job_.erase(job);
}

bool CollectiveLanes::done(const std::pair<int, JobId>& job) const {
  return lanes_[static_cast<size_t>(job.first)].engine->finished(job.second);
}

void CollectiveLanes::release_staging() {
  for (auto it = staging_.begin(); it != staging_.end();) it = done(it->first) ? staging_.erase(it) : std::next(it);
}

}  // namespace px
