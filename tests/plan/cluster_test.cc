// Cluster specs: the presets' figures, "name:nodes", the JSON round trip
// and named errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "plan/cluster.h"

namespace px::plan {
namespace {

TEST(Cluster, PresetsTakeANodeCount) {
  const ClusterSpec a = cluster_named("dgx-a100:64");
  EXPECT_EQ(a.nodes, 64);
  EXPECT_EQ(a.devices(), 512);
  EXPECT_DOUBLE_EQ(a.device.flops_bf16, 312e12);
  EXPECT_EQ(a.link_between(0, 7), LinkClass::intra_node);
  EXPECT_EQ(a.link_between(7, 8), LinkClass::inter_node);
  EXPECT_EQ(cluster_named("dgx-h100").nodes, 1);
  EXPECT_DOUBLE_EQ(cluster_named("dgx-h100").device.flops(DType::f32), 67e12);
}

TEST(Cluster, JsonRoundTrips) {
  const ClusterSpec a = cluster_named("dgx-a100:4");
  EXPECT_EQ(cluster_from_json(to_json(a)), a);
}

// What cluster_from_json says of a bad spec ("" if it takes it).
std::string error_of(const nlohmann::json& spec) {
  try {
    cluster_from_json(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Cluster, BadSpecsAreNamedErrors) {
  EXPECT_THROW(cluster_named("dgx-a100:zero"), Error);
  EXPECT_THROW(cluster_named("dgx-a100:0"), Error);
  try {
    cluster_named("tpu-v9");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dgx-a100, dgx-h100"), std::string::npos) << e.what();
  }
  nlohmann::json bad = to_json(cluster_named("dgx-a100"));
  bad["inter_node"]["bandwidth"] = 0;
  EXPECT_NE(error_of(bad).find("inter_node.bandwidth 0 must be > 0"), std::string::npos) << error_of(bad);
  bad = to_json(cluster_named("dgx-a100"));
  bad["device"]["efficiency"]["collective_units"] = 108;
  EXPECT_NE(error_of(bad).find("collective_units 108 must be in [0, 108)"), std::string::npos) << error_of(bad);
  bad = to_json(cluster_named("dgx-a100"));
  bad["gpus"] = 8;
  EXPECT_THROW(cluster_from_json(bad), Error);
}

}  // namespace
}  // namespace px::plan
