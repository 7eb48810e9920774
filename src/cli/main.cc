// parallax: train deep networks across many devices.
//   parallax train | eval | sample | serve | lower | simulate | plan | launch | doctor | report | bench ...  (--help on each)
// Errors a user can fix print one line "error: ..." and exit 1.
#include <iostream>

#include "cli/bench_comm.h"
#include "cli/bench_serve.h"
#include "cli/blas_core_exec.h"
#include "cli/commands.h"
#include "cli/train_flags.h"
#include "core/error.h"
#include "core/float_env.h"
#include "kernels/blas_core.h"

int main(int argc, char** argv) {
  px::cli::run_on_this_cpus_blas_core(argv);  // first: it may run the process again
  px::flush_subnormals_to_zero();  // before any thread starts: they inherit it
  CLI::App app{"parallax: a C++20 engine for training deep networks across many devices"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every subcommand");
  px::cli::set_parser_conventions(app);
  px::cli::add_train_command(app);
  px::cli::add_eval_command(app);
  px::cli::add_sample_command(app);
  px::cli::add_serve_command(app);
  px::cli::add_export_command(app);
  px::cli::add_lower_command(app);
  px::cli::add_simulate_command(app);
  px::cli::add_calibrate_command(app);
  px::cli::add_plan_command(app);
  px::cli::add_doctor_command(app);
  px::cli::add_launch_command(app);
  px::cli::add_report_command(app);
  CLI::App* bench = app.add_subcommand("bench", "benchmarks (see `parallax bench comm --help`)");
  bench->require_subcommand(1);
  px::cli::add_bench_comm_command(*bench);
  px::cli::add_bench_serve_command(*bench);
  try {
    px::kernels::check_blas_against_reference();
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << " (see --help)" << std::endl;
    return 1;
  } catch (const px::Error& e) {
    std::cout << std::flush;
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cout << std::flush;
    std::cerr << "error: internal: " << e.what() << std::endl;
    return 2;
  }
  return 0;
}
