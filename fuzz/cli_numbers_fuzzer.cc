// Command-line numbers: the input is a `parallax train` command line, one
// argument a line, parsed by the command's own flags (cli/train_flags.h),
// then turned into options, validated, and checked against the memory
// guard's first estimate, as `parallax train` does before it builds
// anything.
#include <algorithm>
#include <vector>

#include "cli/train_flags.h"
#include "fuzz/fuzz_input.h"
#include "runtime/fault/memory_guard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (size_t begin = 0; begin <= text.size() && args.size() < 64;) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    args.emplace_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  // One parser, built once (building it costs more than a parse): each
  // input starts from the flags as they were before any parse.
  static CLI::App app;
  static px::cli::TrainFlags flags;
  static const px::cli::TrainFlags pristine = [] {
    px::cli::set_parser_conventions(app);
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    px::cli::add_train_flags(app, flags);
    return flags;
  }();
  flags = pristine;
  app.clear();
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector last argument first
  try {
    app.parse(args);
  } catch (const CLI::ParseError&) {
    return 0;  // CLI11's own message ("--layers: Value x not in range ..."): a named refusal
  }
  px::fuzz::expect_value_or_named_error([&] {
    px::cli::apply(flags);
    px::JobSpec& o = flags.job;
    px::validate_job(o);
    const int world = std::max(o.launch.ranks, o.strategy.mesh_ranks);
    px::check_model_fits(o.model, px::machine_ranks(o.launch.mpi, o.launch.local_ranks, world), 2);
  });
  return 0;
}
