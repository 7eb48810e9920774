// `parallax lower`: prints the Program one rank runs for a model and a
// strategy, so a user sees exactly which collectives a strategy costs;
// --print-strategy writes the strategy as JSON (for --strategy FILE).
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/train_flags.h"
#include "parallel/lower.h"
#include "plan/program_cost.h"
#include "plan/simulate.h"
#include "plan/job_strategy.h"
#include "nn/build_model.h"

namespace px::cli {

void add_lower_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  auto rank = std::make_shared<int>(0);
  auto print_strategy = std::make_shared<bool>(false);
  auto print_schedule = std::make_shared<bool>(false);
  auto print_cost = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("lower", "print the Program a rank runs for a model and strategy");
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_flags(*cmd, *flags);
  add_parallel_flags(*cmd, *flags);
  flags->precision_flag = add_precision_option(*cmd, flags->precision);
  cmd->add_option("--rank", *rank, "the rank whose Program to print")->capture_default_str();
  cmd->add_flag("--print-strategy", *print_strategy, "print the strategy as JSON instead (for --strategy FILE)");
  cmd->add_flag("--print-schedule", *print_schedule,
                "print the pipeline schedule as a text timeline (one row per stage) and the stages instead");
  cmd->add_flag("--cost", *print_cost,
                "end with the rank's cost, as the golden Programs do: bytes per mesh axis and collective kind, the "
                "liveness peak and a step time replayed with round figures (lowers every rank)");
  cmd->callback([flags, rank, print_strategy, print_schedule, print_cost] {
    apply(*flags);
    JobSpec& o = flags->job;
    if (o.strategy.mesh_ranks > 0) o.launch.ranks = o.strategy.mesh_ranks;  // --mesh names the ranks
    // --pp / --ep / --cp / --tp alone: one rank per stage, expert block, sequence chunk and tensor shard.
    if (o.launch.ranks == 1) o.launch.ranks = o.strategy.pipeline_parallel * o.strategy.expert_parallel * o.strategy.context_parallel *
                                                 o.strategy.tensor_parallel;
    nn::validate(o.model);
    plan::validate_split(o.model, o.strategy, o.launch.ranks, o.data.batch);
    const nn::Model model = nn::build_model(o.model, o.data.batch, true);
    const parallel::Strategy strategy = plan::strategy_for(o.strategy, model, o.launch.ranks, run_use(o.optimizer));
    if (*print_strategy) {
      std::cout << parallel::to_json(strategy).dump(2) << "\n";
      return;
    }
    const parallel::Program program = parallel::lower(plan::lower_request(model, o.strategy), strategy, *rank);
    if (*print_schedule) {
      if (program.pipeline.axis < 0) fail("--print-schedule: the strategy has no pipeline stages (give --pp)");
      std::cout << parallel::describe_pipeline(program.pipeline);
      return;
    }
    std::cout << program.str();
    if (*print_cost)
      std::cout << plan::program_footer(plan::lower_all(plan::lower_request(model, o.strategy), strategy), *rank);
  });
}

}  // namespace px::cli
