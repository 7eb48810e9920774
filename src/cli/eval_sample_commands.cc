// `parallax eval` and `parallax sample`: load a checkpoint directory written
// by `parallax train --save` (its state.json says which model and data).
#include <iostream>

#include "cli/commands.h"
#include "cli/train_flags.h"
#include "graph/precision.h"
#include "kernels/cpu_features.h"
#include "kernels/threads.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/tasks/model_json.h"
#include "runtime/tasks/sampling.h"
#include "runtime/tasks/task.h"

namespace px::cli {
namespace {

// The model a checkpoint was trained and the data it was trained on
// (state.json's config), the data path overridden when one is given.
struct ModelAndData {
  nn::ModelConfig model;
  DataOptions data;
};

ModelAndData saved_model(const std::string& dir, const std::string& data_override) {
  ModelAndData saved;
  apply_model_json(read_checkpoint_state(dir).config, saved.model, saved.data);
  if (!data_override.empty()) saved.data.path = data_override;
  return saved;
}

ParamStore load_params(const Task& task, const std::string& dir) {
  ParamStore params = ParamStore::initialize(task.build(1, false).graph, 0);
  params.load(load_model_weights(dir));
  return params;
}

// What `parallax eval` evaluates: a checkpoint's model, or an ONNX model's
// (--model FILE.onnx alone: the file's own initializers).
ModelAndData eval_target(const std::string& checkpoint, const std::string& model, const nn::OnnxConfig& onnx,
                         const std::string& data) {
  if (!checkpoint.empty()) {
    if (!model.empty()) fail("eval: give --checkpoint (its config names the model) or --model FILE.onnx, not both");
    return saved_model(checkpoint, data);
  }
  if (!nn::is_onnx_path(model))
    fail("eval: give --checkpoint DIR, or --model FILE.onnx to evaluate an ONNX model's own weights");
  ModelAndData target;
  target.model.kind = model;
  target.model.onnx = onnx;
  target.data.path = data;
  return target;
}

}  // namespace

void add_eval_command(CLI::App& app) {
  struct Options {
    std::string checkpoint, data, model;
    nn::OnnxConfig onnx;
    std::vector<std::string> inputs;
    int64_t batch = 16, eval_batches = 20;
    int threads = 2;
    std::string precision = "fp32";
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("eval", "evaluate a checkpoint (or an ONNX model's own weights) on its "
                                             "validation/test set");
  cmd->add_option("--checkpoint", o->checkpoint, "checkpoint directory");
  cmd->add_option("--model", o->model, "FILE.onnx without --checkpoint: evaluate the file's own weights");
  cmd->add_option("--loss", o->onnx.loss, "FILE.onnx: as train's --loss")->check(CLI::IsMember({"cross_entropy", "mse"}));
  cmd->add_option("--input", o->inputs, "FILE.onnx: as train's --input NAME=ROLE");
  cmd->add_option("--data", o->data, "override the checkpoint's data path");
  cmd->add_option("--batch", o->batch, "gpt: validation batch size")->capture_default_str();
  cmd->add_option("--eval-batches", o->eval_batches,
                  "validation batches (gpt: of --batch; mlp/cnn: of 1000 test images, all 10 by default)")
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "threads for kernels and BLAS")->capture_default_str();
  add_precision_option(*cmd, o->precision);
  cmd->callback([o] {
    kernels::set_threads(o->threads);
    for (const std::string& text : o->inputs) o->onnx.bindings.push_back(nn::parse_input_binding(text));
    ModelAndData t = eval_target(o->checkpoint, o->model, o->onnx, o->data);
    const Precision precision = parse_precision(o->precision);  // checkpoints are fp32 whatever they were trained in
    if (precision == Precision::bf16) kernels::require_avx512_bf16("--precision bf16");
    t.data.batch = o->batch;
    t.data.eval_batches = o->eval_batches;
    validate(t.data);
    auto task = make_task(t.model, t.data, 1, precision);
    ParamStore params = o->checkpoint.empty() ? initial_parameters(task->build(1, false).graph, 0)
                                              : load_params(*task, o->checkpoint);
    Evaluation e = task->evaluate(params).mean();
    std::cout << fmt::format("val_loss {:.4f}", e.loss);
    if (e.accuracy >= 0) std::cout << fmt::format(" val_accuracy {:.2f}%", 100 * e.accuracy);
    std::cout << "\n";
  });
}

void add_sample_command(CLI::App& app) {
  struct Options {
    std::string checkpoint, prompt = "\n";
    SampleOptions sample;
    int threads = 1;
    std::string precision = "fp32";
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("sample", "generate text from a GPT checkpoint");
  cmd->add_option("--checkpoint", o->checkpoint, "checkpoint directory")->required();
  cmd->add_option("--prompt", o->prompt, "text to continue (default: a newline)");
  cmd->add_option("--tokens", o->sample.tokens, "bytes to generate")->capture_default_str();
  cmd->add_option("--temperature", o->sample.sampling.temperature, "softmax temperature (0: greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", o->sample.sampling.top_k, "sample among the k likeliest bytes (0: all)")
      ->capture_default_str();
  cmd->add_option("--top-p", o->sample.sampling.top_p, "then among the likeliest whose probability reaches p")
      ->capture_default_str();
  cmd->add_option("--seed", o->sample.seed, "sampling seed")->capture_default_str();
  cmd->add_option("--threads", o->threads, "threads for kernels and BLAS")->capture_default_str();
  add_precision_option(*cmd, o->precision);
  cmd->callback([o] {
    kernels::set_threads(o->threads);
    o->sample.precision = parse_precision(o->precision);
    if (o->sample.precision == Precision::bf16) kernels::require_avx512_bf16("--precision bf16");
    validate(o->sample);
    const nn::ModelConfig model = saved_model(o->checkpoint, "").model;
    if (model.kind != "gpt") fail("checkpoint '{}' holds a {} model; sample needs a gpt checkpoint", o->checkpoint, model.kind);
    nn::validate(model.gpt);
    ParamStore params = ParamStore::initialize(nn::build_gpt(model.gpt, 1, 1, false).graph, 0);
    params.load(load_model_weights(o->checkpoint));
    std::cout << o->prompt << sample_text(model.gpt, params, o->prompt, o->sample) << std::endl;
  });
}

}  // namespace px::cli
