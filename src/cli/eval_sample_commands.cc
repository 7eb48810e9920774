// `parallax eval` and `parallax sample`: load a checkpoint directory written
// by `parallax train --save` (its state.json says which model and data).
#include <iostream>

#include "cli/commands.h"
#include "cli/train_flags.h"
#include "kernels/cpu_features.h"
#include "kernels/threads.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/tasks/sampling.h"
#include "runtime/tasks/task.h"

namespace px::cli {
namespace {

// The training options a checkpoint was made with (model config, data).
TrainOptions options_from_checkpoint(const std::string& dir, const std::string& data_override) {
  TrainOptions o;
  apply_model_json(read_checkpoint_state(dir).config, o);
  if (!data_override.empty()) o.data = data_override;
  return o;
}

ParamStore load_params(const Task& task, const std::string& dir) {
  ParamStore params = ParamStore::initialize(task.build(1, false).graph, 0);
  params.load(load_model_weights(dir));
  return params;
}

// The options `parallax eval` evaluates: a checkpoint's, or an ONNX
// model's (--model FILE.onnx alone: the file's own initializers).
TrainOptions eval_options(const std::string& checkpoint, const std::string& model, const nn::OnnxConfig& onnx,
                          const std::string& data) {
  if (!checkpoint.empty()) {
    if (!model.empty()) fail("eval: give --checkpoint (its config names the model) or --model FILE.onnx, not both");
    return options_from_checkpoint(checkpoint, data);
  }
  if (!nn::is_onnx_path(model))
    fail("eval: give --checkpoint DIR, or --model FILE.onnx to evaluate an ONNX model's own weights");
  TrainOptions o;
  o.model = model;
  o.onnx = onnx;
  o.data = data;
  return o;
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
    TrainOptions t = eval_options(o->checkpoint, o->model, o->onnx, o->data);
    t.precision = o->precision;  // checkpoints are fp32 whatever they were trained in
    if (t.precision == "bf16") kernels::require_avx512_bf16("--precision bf16");
    t.batch = o->batch;
    t.eval_batches = o->eval_batches;
    t.steps = 1;
    auto task = make_task(t.task_options());
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
  cmd->add_option("--temperature", o->sample.temperature, "softmax temperature (> 0)")->capture_default_str();
  cmd->add_option("--top-k", o->sample.top_k, "sample among the k likeliest bytes (0: all)")->capture_default_str();
  cmd->add_option("--seed", o->sample.seed, "sampling seed")->capture_default_str();
  cmd->add_option("--threads", o->threads, "threads for kernels and BLAS")->capture_default_str();
  add_precision_option(*cmd, o->precision);
  cmd->callback([o] {
    kernels::set_threads(o->threads);
    o->sample.precision = parse_precision(o->precision);
    if (o->sample.precision == Precision::bf16) kernels::require_avx512_bf16("--precision bf16");
    validate(o->sample);
    TrainOptions t = options_from_checkpoint(o->checkpoint, "");
    if (t.model != "gpt") fail("checkpoint '{}' holds a {} model; sample needs a gpt checkpoint", o->checkpoint, t.model);
    nn::validate(t.gpt);
    ParamStore params = ParamStore::initialize(nn::build_gpt(t.gpt, 1, 1, false).graph, 0);
    params.load(load_model_weights(o->checkpoint));
    std::cout << o->prompt << sample_text(t.gpt, params, o->prompt, o->sample) << std::endl;
  });
}

}  // namespace px::cli
