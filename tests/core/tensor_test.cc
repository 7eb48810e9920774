#include <gtest/gtest.h>

#include <thread>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define PX_TEST_ASAN 1
#endif
#endif

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

// Dims read from files (found by fuzz/idx_fuzzer.cc): an element count past
// int64 is a named error, and a zero dim makes the count 0 whatever the rest.
TEST(Shape, ElementCountPastInt64IsANamedErrorAndAZeroDimIsEmpty) {
  const int64_t big = int64_t{1} << 40;
  EXPECT_THROW(
      {
        try {
          Shape({big, big}).numel();
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("more than 2^63 elements"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  EXPECT_EQ(Shape({big, big, 0}).numel(), 0);
  EXPECT_EQ(Shape({3, 4, 5}).numel(1, 3), 20);
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

// In-process ranks are threads: each charges its own account, and a tensor
// freed on another thread credits the account that paid for it.
TEST(Memory, AccountsChargeTheirThreadsAndCreditWhereverFreed) {
  MemoryAccount* mine = new_memory_account();
  MemoryAccount* other = new_memory_account();
  Tensor kept;
  {
    MemoryAccountScope scope(mine);
    Tensor a = Tensor::empty({1024});
    kept = Tensor::empty({256});
    EXPECT_EQ(mine->stats().live_bytes, 4096 + 1024);
    std::thread([&] {
      MemoryAccountScope theirs(other);
      Tensor b = Tensor::empty({512});
      EXPECT_EQ(other->stats().live_bytes, 2048);
      a = Tensor();  // freed here, credited to `mine`
    }).join();
    EXPECT_EQ(mine->stats().live_bytes, 1024);
    EXPECT_EQ(other->stats().live_bytes, 0);
    EXPECT_EQ(other->stats().peak_bytes, 2048);
  }
  EXPECT_EQ(current_memory_account(), nullptr);
  kept = Tensor();
  EXPECT_EQ(mine->stats().live_bytes, 0);
  EXPECT_EQ(mine->stats().peak_bytes, 4096 + 1024);
  mine->reset_peak();
  EXPECT_EQ(mine->stats().peak_bytes, 0);
}

// Large blocks are reused from step to step (under ASan by the tensor
// block cache, in release by glibc's heap): a block freed by one account
// and handed to another charges the new one, and under ASan a freed block
// is poisoned until it is handed out again.
TEST(Memory, ReusedLargeBlocksChargeTheirNewAccountAndArePoisonedWhileFree) {
  MemoryAccount* first = new_memory_account();
  MemoryAccount* second = new_memory_account();
  const Shape large({1 << 18});  // 1 MiB of f32
  const float* freed = nullptr;
  {
    MemoryAccountScope scope(first);
    Tensor t = Tensor::full(large, 1.0f);
    freed = t.f32();
  }
#ifdef PX_TEST_ASAN
  EXPECT_TRUE(__asan_address_is_poisoned(freed));
#endif
  std::thread([&] {
    MemoryAccountScope scope(second);
    Tensor t = Tensor::zeros(large);
#ifdef PX_TEST_ASAN
    EXPECT_EQ(t.f32(), freed) << "the cache hands the freed block of the same size back";
#endif
    EXPECT_EQ(t.f32()[(1 << 18) - 1], 0.0f);
    EXPECT_EQ(second->stats().live_bytes, 1 << 20);
    EXPECT_EQ(first->stats().live_bytes, 0);
  }).join();
  EXPECT_EQ(second->stats().live_bytes, 0);
  EXPECT_EQ(first->stats().peak_bytes, 1 << 20);
}

}  // namespace px
