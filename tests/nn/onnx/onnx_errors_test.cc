// Bad ONNX input gives one-line errors that name the file and what is wrong:
// each case edits the MLP fixture's ModelProto (or its bytes) one way.
#include <gtest/gtest.h>

#include <functional>

#include <onnx/onnx_pb.h>

#include "core/error.h"
#include "nn/onnx/onnx_import.h"
#include "testing/scratch_dir.h"

namespace px {
namespace {

const std::string kMlp = std::string(PX_ONNX_FIXTURES) + "/mlp.onnx";

::onnx::ModelProto mlp_proto() {
  ::onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromString(testing::read_file(kMlp)));
  return model;
}

// The error importing `bytes` (with `config`'s bindings) gives; "" if none.
std::string import_error(const std::string& bytes, nn::OnnxConfig config = {}) {
  testing::ScratchDir dir;
  config.path = dir.file("model.onnx");
  testing::write_file(config.path, bytes);
  try {
    nn::import_onnx(config, 8, true);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string edited(const std::function<void(::onnx::ModelProto&)>& edit) {
  ::onnx::ModelProto model = mlp_proto();
  edit(model);
  return model.SerializeAsString();
}

// `message` is one line and holds every one of `parts`.
void expect_named(const std::string& message, const std::vector<std::string>& parts) {
  ASSERT_FALSE(message.empty()) << "no error";
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
}

::onnx::NodeProto& node_of_type(::onnx::ModelProto& model, const std::string& type) {
  for (auto& node : *model.mutable_graph()->mutable_node())
    if (node.op_type() == type) return node;
  throw std::logic_error("no " + type + " node");
}

TEST(OnnxErrors, TheFixtureItselfImports) { EXPECT_EQ(import_error(testing::read_file(kMlp)), ""); }

TEST(OnnxErrors, ATruncatedFileIsNamed) {
  const std::string bytes = testing::read_file(kMlp);
  expect_named(import_error(bytes.substr(0, bytes.size() / 2)), {"model.onnx", "not a valid ONNX model", "truncated"});
}

TEST(OnnxErrors, ACorruptFileIsNamed) {
  expect_named(import_error(std::string(256, '\xff')), {"model.onnx", "not a valid ONNX model"});
}

TEST(OnnxErrors, AMissingFileIsNamed) {
  try {
    nn::import_onnx({.path = "/nonexistent/model.onnx"}, 8, true);
    FAIL() << "imported a missing file";
  } catch (const Error& e) {
    expect_named(e.what(), {"cannot open '/nonexistent/model.onnx'"});
  }
}

TEST(OnnxErrors, AnOpsetOutsideThirteenToSeventeenIsNamed) {
  expect_named(import_error(edited([](auto& m) { m.mutable_opset_import(0)->set_version(9); })),
               {"uses opset 9", "opsets 13 to 17"});
}

TEST(OnnxErrors, AnInitializerWhoseDataDisagreesWithItsShapeIsNamed) {
  const std::string bytes = edited([](auto& m) {
    for (auto& t : *m.mutable_graph()->mutable_initializer())
      if (t.name() == "fc1.weight") t.mutable_raw_data()->resize(t.raw_data().size() - 4);
  });
  expect_named(import_error(bytes), {"initializer 'fc1.weight'", "[32,784]", "100348 bytes", "needs 100352"});
}

TEST(OnnxErrors, AnUnsupportedOperatorNamesItsTypeNodeAndTheSupportedSet) {
  const std::string bytes = edited([](auto& m) { node_of_type(m, "Relu").set_op_type("Selu"); });
  expect_named(import_error(bytes), {"operator Selu", "node '/Relu'", "supported: ", "Conv", "Gemm"});
}

// A node of `type` inserted after the MLP's Relu (32 features), reading its
// output and `more` inputs (initializers of 32 ones made here), its output
// what the Relu's was.
void insert_after_relu(::onnx::ModelProto& m, const std::string& type, const std::vector<std::string>& more,
                       const std::function<void(::onnx::NodeProto&)>& attributes = {}) {
  auto* nodes = m.mutable_graph()->mutable_node();
  int relu = 0;
  while (nodes->Get(relu).op_type() != "Relu") ++relu;
  const std::string out = nodes->Get(relu).output(0);
  nodes->Mutable(relu)->set_output(0, out + ".before");
  ::onnx::NodeProto* node = nodes->Add();
  node->set_op_type(type);
  node->set_name("/inserted/" + type);
  node->add_input(out + ".before");
  for (const std::string& name : more) {
    node->add_input(name);
    auto* t = m.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::FLOAT);
    t->add_dims(32);
    for (int i = 0; i < 32; ++i) t->add_float_data(1.0f);
  }
  node->add_output(out);
  if (attributes) attributes(*node);
  for (int i = nodes->size() - 1; i > relu + 1; --i) nodes->SwapElements(i, i - 1);
}

TEST(OnnxErrors, BatchNormalizationIsRefusedByNameWithWhatToDo) {
  const std::string bytes = edited(
      [](auto& m) { insert_after_relu(m, "BatchNormalization", {"bn.scale", "bn.bias", "bn.mean", "bn.var"}); });
  expect_named(import_error(bytes), {"node '/inserted/BatchNormalization'", "batch normalization",
                                     "model.eval()", "LayerNorm"});
}

TEST(OnnxErrors, ACastWithinFloatsImportsAndACastAcrossKindsIsNamed) {
  auto cast_to = [](int to) {
    return edited([to](auto& m) {
      insert_after_relu(m, "Cast", {}, [to](::onnx::NodeProto& n) {
        auto* a = n.add_attribute();
        a->set_name("to");
        a->set_type(::onnx::AttributeProto::INT);
        a->set_i(to);
      });
    });
  };
  EXPECT_EQ(import_error(cast_to(::onnx::TensorProto::FLOAT)), "");
  expect_named(import_error(cast_to(::onnx::TensorProto::INT64)), {"node '/inserted/Cast'", "casts within floats"});
}

TEST(OnnxErrors, AConcatOfComputedValuesImportsAsConcat) {
  const std::string bytes = edited([](auto& m) {
    insert_after_relu(m, "Concat", {}, [](::onnx::NodeProto& n) {
      auto* a = n.add_attribute();
      a->set_name("axis");
      a->set_type(::onnx::AttributeProto::INT);
      a->set_i(-1);
    });
  });
  testing::ScratchDir dir;
  const std::string path = dir.file("concat.onnx");
  testing::write_file(path, bytes);
  const nn::Model model = nn::import_onnx({.path = path}, 8, true);
  int concats = 0;
  for (const Node& n : model.graph.nodes()) concats += n.op() == "concat";
  EXPECT_EQ(concats, 1);
}

// The shape operators fold; reading a value computed from the data (the
// Relu's output here) they are refused by name.
TEST(OnnxErrors, AShapeOperatorOfAComputedValueIsNamed) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases{
      {"Range", {"limit", "delta"}}, {"Expand", {"shape"}}, {"Greater", {"other"}}, {"Not", {}}};
  for (const auto& [type, more] : cases)
    expect_named(import_error(edited([&, &type = type, &more = more](auto& m) { insert_after_relu(m, type, more); })),
                 {"node '/inserted/" + type + "' (" + type + ")",
                  "folds this operator only when its inputs are constants", "computed from the data"});
}

TEST(OnnxErrors, AGraphTheCheckerRejectsIsNamed) {
  const std::string bytes = edited([](auto& m) { node_of_type(m, "Relu").set_op_type("NoSuchOperator"); });
  expect_named(import_error(bytes), {"fails the ONNX checker", "NoSuchOperator"});
}

TEST(OnnxErrors, AnInputNoDatasetFitsIsNamed) {
  const std::string bytes = edited([](auto& m) {
    auto* shape = m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->mutable_dim(1)->set_dim_value(3 * 32 * 32);
  });
  expect_named(import_error(bytes), {"input 'x' is float [?,3072]", "no dataset fits", "--input x=ROLE"});
}

TEST(OnnxErrors, AFixedBatchDimOtherThanTheBatchIsNamed) {
  const std::string bytes = edited([](auto& m) {
    auto* shape = m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->mutable_dim(0)->set_dim_value(4);
  });
  expect_named(import_error(bytes), {"fixed batch dim 4", "8 rows", "dynamic_axes"});
}

TEST(OnnxErrors, ABindingOfAnUnknownInputNamesTheInputs) {
  nn::OnnxConfig config{.bindings = {{.input = "pixels", .role = nn::InputRole::images}}};
  expect_named(import_error(testing::read_file(kMlp), config), {"--input pixels=images", "inputs: x"});
}

TEST(OnnxErrors, ABindingToADatasetThatDoesNotFitIsNamed) {
  nn::OnnxConfig config{.bindings = {{.input = "x", .role = nn::InputRole::tokens}}};
  expect_named(import_error(testing::read_file(kMlp), config), {"input 'x' is float [?,784] but tokens are int [N,T]"});
}

TEST(OnnxErrors, AnUnknownRoleIsNamed) {
  EXPECT_THROW(nn::parse_input_binding("x=pixels"), Error);
  EXPECT_THROW(nn::parse_input_binding("x"), Error);
  EXPECT_EQ(nn::parse_input_binding("x=labels").role, nn::InputRole::labels);
}

}  // namespace
}  // namespace px
