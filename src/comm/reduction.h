// Reduction kernels shared by every algorithm: elementwise sum/max/min over
// f32, f16 or bf16 buffers, accumulated in f32. avg is a sum here; the
// collective scales by 1/p once at the end (reduce_many can fuse that).
#pragma once

#include <cstdint>
#include <string_view>

#include "comm/transport.h"
#include "core/dtype.h"

namespace px::comm {

std::string_view reduction_name(Reduction op);  // "sum", "avg", "max", "min"
Reduction reduction_from_name(std::string_view name);

// dst[i] = dst[i] op src[i] for i < count.
void reduce_into(void* dst, const void* src, int64_t count, DType dtype, Reduction op);
// dst[i] = (srcs[0][i] op srcs[1][i] op ...) * scale, combined in source
// order so every rank computing it gets identical bits. dst may alias a source.
void reduce_many(void* dst, const void* const* sources, int source_count, int64_t count,
                 DType dtype, Reduction op, float scale = 1.0f);
// data[i] *= factor.
void scale(void* data, int64_t count, DType dtype, float factor);

// Checks that dtype is one collectives reduce (f32, f16, bf16).
void check_reducible(DType dtype, std::string_view collective);

float f16_to_f32(uint16_t half);
uint16_t f32_to_f16(float value);
float bf16_to_f32(uint16_t value);
uint16_t f32_to_bf16(float value);

}  // namespace px::comm
