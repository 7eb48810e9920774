// Small training jobs for tests that run the whole trainer: a generated
// English-like text file and tiny GPT / CNN configurations (CNN on the
// installed Fashion-MNIST).
#pragma once

#include <fstream>
#include <string>

#include "core/rng.h"
#include "runtime/launch/job_spec.h"
#include "testing/scratch_dir.h"

namespace px::testing {

// ~40 KB of English-like text so the byte corpus has a train and a validation split.
inline std::string write_text(const ScratchDir& dir) {
  std::string path = dir.file("text.txt");
  std::ofstream out(path);
  const char* words[] = {"the ", "quick ", "brown ", "fox ", "jumps ", "over ", "lazy ", "dogs ", "\n"};
  Rng rng(3);
  for (int i = 0; i < 8000; ++i) out << words[rng.below(9)];
  return path;
}

// One generated text for every GPT test of a test binary (written once).
inline const std::string& shared_text() {
  static ScratchDir dir;
  static const std::string text = write_text(dir);
  return text;
}

// 2 layers, 16 wide, block 16, batch 4, dropout 0.1, AdamW with clipping.
inline JobSpec tiny_gpt(const std::string& data) {
  JobSpec o;
  o.model.kind = "gpt";
  o.data.path = data;
  o.model.gpt = {.vocab = 256, .block = 16, .n_layer = 2, .n_head = 2, .n_embd = 16, .dropout = 0.1};
  o.run.steps = 8;
  o.data.batch = 4;
  o.optimizer.schedule = {.kind = "cosine", .lr = 3e-3, .warmup = 2, .total = 8, .min_ratio = 0.1};
  o.optimizer.update.kind = "adamw";
  o.optimizer.update.weight_decay = 0.1;
  o.optimizer.grad_clip = 1.0;
  o.data.eval_batches = 2;
  o.run.seed = 5;
  return o;
}

// conv 4 -> conv 8 -> fc 32 -> 10 on Fashion-MNIST, SGD momentum 0.9.
inline JobSpec tiny_cnn() {
  JobSpec o;
  o.model.kind = "cnn";
  o.model.cnn = {.channels1 = 4, .channels2 = 8, .hidden = 32, .classes = 10};
  o.run.steps = 8;
  o.data.batch = 16;
  o.optimizer.schedule = {.kind = "cosine", .lr = 0.05, .warmup = 0, .total = 8, .min_ratio = 0.0};
  o.optimizer.update.kind = "sgd";
  o.optimizer.update.momentum = 0.9;
  o.optimizer.update.weight_decay = 5e-4;
  o.data.eval_batches = 1;  // the final evaluation on 1000 of the 10,000 test images
  o.run.seed = 7;
  return o;
}

// 784 -> 64 -> 32 -> 10 on Fashion-MNIST, SGD momentum 0.9.
inline JobSpec tiny_mlp() {
  JobSpec o = tiny_cnn();
  o.model.kind = "mlp";
  o.model.mlp = {.inputs = 784, .hidden = {64, 32}, .classes = 10};
  o.run.seed = 11;
  return o;
}

}  // namespace px::testing
