#include <gtest/gtest.h>

#include "core/memory.h"
#include "core/tensor.h"

namespace px {

TEST(Tensor, ReshapeSharesStorageAndChecksNumel) {
  Tensor t = Tensor::from_vector({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor r = t.reshape({3, 2});
  EXPECT_TRUE(r.shares_storage(t));
  r.f32()[0] = 7;
  EXPECT_EQ(t.f32()[0], 7);
  EXPECT_THROW(t.reshape({4, 2}), Error);
}

TEST(Tensor, SliceRowsViewsTheRightRows) {
  Tensor t = Tensor::from_vector({3, 2}, std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor s = t.slice_rows(1, 3);
  EXPECT_EQ(s.shape(), Shape({2, 2}));
  EXPECT_EQ(s.to_vector(), (std::vector<float>{3, 4, 5, 6}));
}

TEST(Tensor, TypedAccessChecksDtype) {
  Tensor t = Tensor::zeros({4}, DType::i32);
  EXPECT_THROW(t.f32(), InternalError);
  EXPECT_EQ(t.data<int32_t>()[3], 0);
}

TEST(Memory, PeakTracksLiveTensors) {
  reset_peak_memory();
  int64_t before = memory_stats().live_bytes;
  {
    Tensor a = Tensor::empty({1024});
    EXPECT_EQ(memory_stats().live_bytes, before + 4096);
  }
  EXPECT_EQ(memory_stats().live_bytes, before);
  EXPECT_GE(memory_stats().peak_bytes, before + 4096);
}

}  // namespace px
