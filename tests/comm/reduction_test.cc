#include <gtest/gtest.h>

#include <cmath>

#include "comm/reduction.h"
#include "core/error.h"

namespace px::comm {
namespace {

TEST(Reduction, HalfConversionsRoundTripRepresentableValues) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.9604645e-08f, 1000.5f})
    EXPECT_EQ(f16_to_f32(f32_to_f16(v)), v) << v;
  for (float v : {0.0f, 1.0f, -2.5f, 0x1p100f, 0x1p-126f, 255.0f})
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(v)), v) << v;
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 1.0f / 4096)), 1.0f);  // ties to even
}

TEST(Reduction, ReduceManyCombinesInOrderAndMayAliasASource) {
  std::vector<float> a{1, 5, -3}, b{2, -1, 4}, c{3, 0, 1};
  const void* sources[3] = {a.data(), b.data(), c.data()};
  reduce_many(b.data(), sources, 3, 3, DType::f32, Reduction::max);
  EXPECT_EQ(b, (std::vector<float>{3, 5, 4}));
  std::vector<float> d{1, 2, 3};
  const void* two[2] = {d.data(), a.data()};
  reduce_many(d.data(), two, 2, 3, DType::f32, Reduction::avg, 0.5f);
  EXPECT_EQ(d, (std::vector<float>{1, 3.5f, 0}));
}

TEST(Reduction, NonFloatDtypeIsRejected) {
  std::vector<int32_t> x(3);
  EXPECT_THROW(reduce_into(x.data(), x.data(), 3, DType::i32, Reduction::sum), Error);
  EXPECT_THROW(reduction_from_name("mean"), Error);
}

}  // namespace
}  // namespace px::comm
