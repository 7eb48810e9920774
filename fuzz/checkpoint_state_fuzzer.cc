// Checkpoint state.json: the input replaces the state.json of a real
// checkpoint (a one-step GPT run, made once when the fuzzer starts), which
// is then loaded and read as a resume reads it: the files it lists, the
// model config, the data order's state.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/sampler.h"
#include "fuzz/fuzz_input.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/launch/launch.h"
#include "runtime/tasks/model_json.h"

namespace {

namespace fs = std::filesystem;

// The checkpoint of a tiny GPT trained one step on a little text, in a
// directory removed when the fuzzer exits. (The seeds in
// corpus/checkpoint_state/ are this checkpoint's state.json: the path of
// the text has the same length, so the sizes it records match.)
class TinyCheckpoint {
 public:
  TinyCheckpoint() {
    char pattern[] = "/tmp/parallax-fuzz-checkpoint-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) std::abort();
    root_ = pattern;
    const std::string text_path = root_ + "/text.txt";
    std::ofstream text(text_path);
    for (int i = 0; i < 200; ++i) text << "the quick brown fox jumps over the lazy dog " << i << "\n";
    text.close();
    px::JobSpec o;
    o.model.kind = "gpt";
    o.data.path = text_path;
    o.model.gpt = {.vocab = 256, .block = 8, .n_layer = 1, .n_head = 1, .n_embd = 8, .dropout = 0};
    o.data.batch = 2;
    o.run.steps = 1;
    o.run.eval_every = 0;
    o.data.eval_batches = 1;
    o.run.sample_tokens = 0;
    o.run.threads = 1;
    o.checkpoint.save = root_ + "/ckpt";
    px::apply_model_defaults(o);
    std::ostringstream log;
    px::train(o, log);
  }
  ~TinyCheckpoint() { fs::remove_all(root_); }
  std::string dir() const { return root_ + "/ckpt"; }

 private:
  std::string root_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const TinyCheckpoint checkpoint;
  const std::string dir = checkpoint.dir();
  {
    std::ofstream state(dir + "/state.json", std::ios::binary | std::ios::trunc);
    state.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  px::fuzz::expect_value_or_named_error([&] {
    const px::Checkpoint c = px::load_checkpoint(dir);
    px::JobSpec o;
    px::apply_model_json(c.state.config, o.model, o.data);
    px::apply_model_defaults(o);
    px::validate_job(o);
    // The data order's state, as the task of either kind restores it.
    px::fuzz::expect_value_or_named_error([&] { c.state.data.get<px::WindowSamplerState>(); });
    px::fuzz::expect_value_or_named_error([&] { c.state.data.get<px::EpochSamplerState>(); });
  });
  return 0;
}
