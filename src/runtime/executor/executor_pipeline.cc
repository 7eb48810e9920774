// Send and Recv instructions: the value a send posts (rounded to the
// dtype the later stages read) and where a received one is held; the
// communication itself is Transfers' (transfers.h).
#include <cstring>

#include "comm/collectives.h"
#include "kernels/bf16.h"
#include "runtime/executor/program_executor.h"

namespace px {

void ProgramExecutor::send(int id, const parallel::Send& op) {
  const int m = prog().instrs[static_cast<size_t>(id)].micro_batch;
  Tensor value = live_[static_cast<size_t>(m)][static_cast<size_t>(op.value)];
  PX_CHECK(value.defined(), "send #{}: value {} was not computed", id, op.value);
  if (value.dtype() != op.dtype) {  // a float32 value the later stages read at bf16 precision
    PX_CHECK(value.dtype() == DType::f32 && op.dtype == DType::bf16, "send #{}: {} as {}", id,
             dtype_name(value.dtype()), dtype_name(op.dtype));
    Tensor rounded = Tensor::empty(value.shape(), DType::bf16);
    kernels::to_bf16(value.numel(), value.f32(), static_cast<kernels::bf16*>(rounded.raw()));
    value = std::move(rounded);
  }
  groups_.transfers().send(op, std::move(value), *groups_.axis(op.axis));
}

void ProgramExecutor::recv(int id, const parallel::Recv& op, uint64_t step) {
  const parallel::Instr& instr = prog().instrs[static_cast<size_t>(id)];
  const int m = instr.micro_batch;
  const TensorSpec& spec = prog().graph_of(m).spec(op.value);
  PX_CHECK(spec.dtype == op.dtype, "recv #{}: the local graph holds {} as {}", id, dtype_name(op.dtype),
           dtype_name(spec.dtype));
  Tensor value = Tensor::empty(spec.shape, spec.dtype);
  const double start = trace_.on ? comm::now_us() : 0;
  groups_.transfers().recv(op, value,
                   {.collective = op.axis == prog().pipeline.axis ? "pipeline receive" : "ring receive", .index = m});
  if (trace_.on)
    trace_.add(TraceRecord::Lane::comm, start, static_cast<int64_t>(value.nbytes()), static_cast<int64_t>(step), id);
  // An activation from an earlier stage is held like one made here; a gradient is not.
  const Graph& g = prog().graph_of(m);
  ledger_.produce(m, op.value, static_cast<double>(value.nbytes()),
                  g.nodes()[static_cast<size_t>(g.value(op.value).producer)].origin < 0);
  live_[static_cast<size_t>(m)][static_cast<size_t>(op.value)] = std::move(value);
}

}  // namespace px
