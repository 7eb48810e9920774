#include <gtest/gtest.h>

#include <bit>
#include <fstream>
#include <string>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/bf16.h"
#include "kernels/cpu_features.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

float from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }
uint16_t narrow(float x) { return to_bf16(x).bits; }

TEST(Bf16, RoundsToNearestAndTiesToEven) {
  // 1.0 is 0x3f800000; the bf16 grid above it is 2^-7 apart (0x10000 in float bits).
  EXPECT_EQ(narrow(from_bits(0x3f807fffu)), 0x3f80);  // just below half: down
  EXPECT_EQ(narrow(from_bits(0x3f808001u)), 0x3f81);  // just above half: up
  EXPECT_EQ(narrow(from_bits(0x3f808000u)), 0x3f80);  // tie, 0x3f80 even: down
  EXPECT_EQ(narrow(from_bits(0x3f818000u)), 0x3f82);  // tie, 0x3f81 odd: up to even
  EXPECT_EQ(narrow(from_bits(0xbf818000u)), 0xbf82);  // negative ties too
  EXPECT_EQ(narrow(1.0f), 0x3f80);
  EXPECT_EQ(narrow(-2.5f), 0xc020);
}

TEST(Bf16, KeepsInfinitiesAndOverflowsToInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(narrow(inf), 0x7f80);
  EXPECT_EQ(narrow(-inf), 0xff80);
  EXPECT_EQ(narrow(std::numeric_limits<float>::max()), 0x7f80);  // rounds up past bf16's max
  EXPECT_EQ(narrow(from_bits(0x7f7f7fffu)), 0x7f7f);             // largest that rounds down
  EXPECT_TRUE(std::isinf(to_float(to_bf16(-inf))));
}

TEST(Bf16, NanStaysQuietNanWithItsSign) {
  for (uint32_t bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa00000u, 0xff800001u}) {
    const bf16 y = to_bf16(from_bits(bits));
    EXPECT_TRUE(std::isnan(to_float(y))) << std::hex << bits;
    EXPECT_EQ(y.bits & 0x8000u, (bits >> 16) & 0x8000u) << std::hex << bits;
    EXPECT_NE(y.bits & 0x0040u, 0u) << "quiet bit, " << std::hex << bits;
  }
  // A signalling NaN whose payload lives in the low 16 bits must not become inf.
  EXPECT_EQ(narrow(from_bits(0x7f800001u)), 0x7fc0);
}

TEST(Bf16, FlushesFloatDenormalsToSignedZero) {
  EXPECT_EQ(narrow(from_bits(0x00000001u)), 0x0000);
  EXPECT_EQ(narrow(from_bits(0x807fffffu)), 0x8000);
  EXPECT_EQ(narrow(from_bits(0x00800000u)), 0x0080);  // smallest normal is kept
  EXPECT_EQ(narrow(-0.0f), 0x8000);
}

TEST(Bf16, EveryBf16SurvivesARoundTrip) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const bf16 x{static_cast<uint16_t>(bits)};
    const float wide = to_float(x);
    if (std::isnan(wide) || (bits & 0x7f80u) == 0) continue;  // NaNs get quieted, denormals flushed
    EXPECT_EQ(to_bf16(wide), x) << std::hex << bits;
  }
}

// The array conversions against the scalar rule on 2^22 bit patterns spread
// over all of float32 (every sign, exponent and rounding case, NaNs,
// denormals), at lengths that leave every tail size 0..31, on one thread
// and split across two.
TEST(Bf16, VectorConversionMatchesScalarBitForBit) {
  testing::ThreadReset reset;
  std::vector<float> x;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 1021) x.push_back(from_bits(uint32_t(bits)));
  for (uint32_t bits : {0x3f808000u, 0x3f818000u, 0x7f800000u, 0xff800000u, 0x7fc00001u, 0x00000001u})
    x.push_back(from_bits(bits));
  const std::vector<int64_t> lengths = {int64_t(x.size()), 1, 15, 16, 17, 31, 33, int64_t(x.size()) - 7};
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (int64_t n : lengths) {
      std::vector<bf16> fast(size_t(n) + 1, bf16{0xabcd}), slow(size_t(n) + 1, bf16{0xabcd});
      to_bf16(n, x.data(), fast.data());
      ref::to_bf16(n, x.data(), slow.data());
      ASSERT_EQ(fast, slow) << "n=" << n << " threads=" << threads;  // including the untouched guard element
      std::vector<float> back_fast(size_t(n) + 1, 7.0f), back_slow(size_t(n) + 1, 7.0f);
      to_float(n, fast.data(), back_fast.data());
      ref::to_float(n, slow.data(), back_slow.data());
      for (int64_t i = 0; i <= n; ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(back_fast[i]), std::bit_cast<uint32_t>(back_slow[i])) << i;
    }
  }
}

// Narrowing then widening moves a normal value by at most half a bf16 ulp:
// x in [2^e, 2^(e+1)) has bf16 neighbours 2^(e-7) apart (8 significant bits),
// so |x - bf16(x)| <= 2^(e-8).
TEST(Bf16, RoundTripErrorIsAtMostHalfAnUlp) {
  const std::vector<float> x = testing::random_vector(10007, 5, -1e4f, 1e4f);
  std::vector<bf16> narrow_x(x.size());
  std::vector<float> back(x.size());
  to_bf16(int64_t(x.size()), x.data(), narrow_x.data());
  to_float(int64_t(x.size()), narrow_x.data(), back.data());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_LE(std::fabs(back[i] - x[i]), std::ldexp(1.0f, std::ilogb(x[i]) - 8)) << x[i];
}

TEST(CpuFeatures, Bf16RequirementNamesTheRequesterAndTheFix) {
  EXPECT_NO_THROW(require_avx512_bf16("--precision bf16", true));
  try {
    require_avx512_bf16("--precision bf16", false);
    FAIL() << "expected px::Error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--precision bf16 needs a CPU with AVX512_BF16"), std::string::npos) << what;
    EXPECT_NE(what.find("use fp32 precision"), std::string::npos) << what;
  }
}

TEST(CpuFeatures, ThisCpuMatchesProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  if (!in) GTEST_SKIP() << "no /proc/cpuinfo";
  bool listed = false;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("flags", 0) == 0) listed = line.find(" avx512_bf16") != std::string::npos;
  EXPECT_EQ(cpu_has_avx512_bf16(), listed);
}

}  // namespace
}  // namespace px::kernels
