// The mixture-of-experts ops beyond the generic harnesses: the grouped
// GEMM against its per-row reference, the router's choices (ranked
// admission under a capacity, ties, bit-identical rows under any split),
// and the named error for an expert that does not exist.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "core/rng.h"
#include "graph/op.h"
#include "kernels/moe.h"
#include "op_harness.h"

namespace px {
namespace {

using testing::max_relative_diff;
using testing::run_op;

Tensor normal_tensor(const Shape& shape, Rng& rng) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(rng.normal());
  return t;
}

Tensor choices(const std::vector<int32_t>& values) {
  return Tensor::from_vector(Shape{static_cast<int64_t>(values.size())}, values);
}

TEST(MoeOps, GroupedGemmMatchesThePerRowReferenceWithDroppedRowsAndIdleExperts) {
  Rng rng(3);
  const int64_t R = 37, E = 5, P = 24, Q = 40;
  std::vector<int32_t> c(R);
  for (int64_t r = 0; r < R; ++r) c[static_cast<size_t>(r)] = static_cast<int32_t>(r % 7 == 3 ? -1 - r % 4 : r % 4);
  const Tensor choice = choices(c);  // expert 4 gets no row
  const Tensor w = normal_tensor({E, P, Q}, rng);
  for (bool trans : {false, true}) {
    const Tensor x = normal_tensor({R, trans ? Q : P}, rng);
    const auto got = run_op(OpRegistry::instance().get("moe_linear"), {{"trans_w", int64_t{trans}}}, {x, w, choice});
    Tensor expected = Tensor::empty({R, trans ? P : Q});
    kernels::ref::moe_linear(R, E, P, Q, trans, x.f32(), w.f32(), c.data(), expected.f32());
    EXPECT_LT(max_relative_diff(got[0], expected), 1e-5) << "trans " << trans;
    for (int64_t o = 0; o < expected.dim(1); ++o) EXPECT_EQ(got[0].f32()[3 * expected.dim(1) + o], 0.0f);
  }
}

// Rows already grouped by expert (a routed exchange's arrivals): the GEMMs
// read them in place, and the weight gradient too, as the gathered path.
TEST(MoeOps, RowsGroupedByExpertRunInPlaceAsTheGatheredPathDoes) {
  Rng rng(4);
  const int64_t R = 29, E = 4, P = 16, Q = 24;
  std::vector<int32_t> c(R);
  for (int64_t r = 0; r < R; ++r) c[static_cast<size_t>(r)] = static_cast<int32_t>(r < 10 ? 0 : r < 11 ? 2 : 3);
  EXPECT_TRUE(kernels::group_rows_by_expert(R, E, c.data()).in_place);
  const Tensor w = normal_tensor({E, P, Q}, rng), x = normal_tensor({R, P}, rng), dy = normal_tensor({R, Q}, rng);
  const auto got = run_op(OpRegistry::instance().get("moe_linear"), {}, {x, w, choices(c)});
  Tensor expected = Tensor::empty({R, Q});
  kernels::ref::moe_linear(R, E, P, Q, false, x.f32(), w.f32(), c.data(), expected.f32());
  EXPECT_LT(max_relative_diff(got[0], expected), 1e-5);
  // The weight gradient: in place against the rows shuffled (gathered).
  std::vector<int32_t> shuffled(c.rbegin(), c.rend());
  Tensor xr = Tensor::empty({R, P}), dyr = Tensor::empty({R, Q});
  for (int64_t r = 0; r < R; ++r) {
    std::copy_n(x.f32() + (R - 1 - r) * P, P, xr.f32() + r * P);
    std::copy_n(dy.f32() + (R - 1 - r) * Q, Q, dyr.f32() + r * Q);
  }
  EXPECT_FALSE(kernels::group_rows_by_expert(R, E, shuffled.data()).in_place);
  const OpDef& grad_w = OpRegistry::instance().get("moe_linear_grad_w");
  const auto in_place = run_op(grad_w, {{"experts", E}}, {x, dy, choices(c)});
  const auto gathered = run_op(grad_w, {{"experts", E}}, {xr, dyr, choices(shuffled)});
  EXPECT_LT(max_relative_diff(in_place[0], gathered[0]), 1e-5);
}

TEST(MoeRouting, CapacityAdmitsEveryTokensFirstChoiceBeforeAnySecond) {
  // Four tokens all prefer expert 0, then expert 1 (E = 3, k = 2); capacity 2.
  const std::vector<float> logits = {3, 2, 0, 3, 2, 0, 3, 2, 0, 3, 2, 0};
  std::vector<int32_t> choice(8);
  std::vector<float> gates(8), counts(3, 0);
  kernels::moe_route({.rows = 4, .experts = 3, .k = 2, .capacity = 2}, logits.data(), nullptr, choice.data(),
                     gates.data(), counts.data());
  // Tokens 0 and 1 keep their first choice, 2 and 3 lose it; second choices
  // (expert 1) go to tokens 0 and 1 only.
  EXPECT_EQ(choice, (std::vector<int32_t>{0, 1, 0, 1, -1, -2, -1, -2}));
  EXPECT_EQ(counts, (std::vector<float>{4, 4, 0}));  // counted before dropping
  EXPECT_NEAR(gates[0] + gates[1], 1.0, 1e-6);       // renormalised over the chosen, dropped or not
}

TEST(MoeRouting, TiesGoToTheLowerExpertAndTheBiasSteersOnly) {
  const std::vector<float> logits = {1, 1, 1, 1};
  std::vector<int32_t> choice(2);
  std::vector<float> gates(2), counts(4, 0);
  kernels::moe_route({.rows = 1, .experts = 4, .k = 2}, logits.data(), nullptr, choice.data(), gates.data(),
                     counts.data());
  EXPECT_EQ(choice, (std::vector<int32_t>{0, 1}));
  const std::vector<float> bias = {0, 0, 0.5f, 0.25f};
  kernels::moe_route({.rows = 1, .experts = 4, .k = 2}, logits.data(), bias.data(), choice.data(), gates.data(),
                     counts.data());
  EXPECT_EQ(choice, (std::vector<int32_t>{2, 3}));
  EXPECT_FLOAT_EQ(gates[0], 0.5f);  // the gates are the unbiased probabilities, renormalised
}

TEST(MoeRouting, ARowsLogitsAreTheSameBitsWhateverRowsComeWithIt) {
  Rng rng(9);
  const int64_t N = 13, C = 48, E = 8;
  const Tensor x = normal_tensor({N, C}, rng), w = normal_tensor({C, E}, rng);
  const OpDef& router = OpRegistry::instance().get("moe_router");
  const Tensor whole = run_op(router, {}, {x, w})[0];
  for (int64_t begin : {0, 5, 12}) {
    const Tensor part = run_op(router, {}, {x.slice_rows(begin, N).clone(), w})[0];
    EXPECT_EQ(std::memcmp(part.f32(), whole.f32() + begin * E, static_cast<size_t>(part.numel()) * 4), 0)
        << "rows from " << begin;
  }
}

TEST(MoeOps, ARowRoutedToAnExpertThatDoesNotExistIsANamedError) {
  Rng rng(1);
  const Tensor x = normal_tensor({3, 4}, rng), w = normal_tensor({2, 4, 5}, rng);
  try {
    run_op(OpRegistry::instance().get("moe_linear"), {}, {x, w, choices({0, 7, 1})});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row 1 is routed to expert 7, but there are 2 experts"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace px
