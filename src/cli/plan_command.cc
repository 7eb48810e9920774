// `parallax plan`: a model, a global batch and a cluster (a preset, a JSON
// file, or --cluster local --ranks N after `parallax calibrate`) in; the
// fastest strategy that fits out (plan/search.h), as the strategy JSON
// `parallax train --strategy` runs, with a table of the best candidates and
// why the others were rejected.
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/local_cluster.h"
#include "cli/precision_choice.h"
#include "cli/train_flags.h"
#include "nn/gpt.h"
#include "parallel/strategy.h"
#include "plan/published_checks.h"
#include "plan/search.h"
#include "plan/speed_split.h"
#include "core/atomic_file.h"
#include "runtime/optimizer/optimizer.h"
#include "nn/build_model.h"

namespace px::cli {
namespace {

struct PlanFlags {
  std::string cluster = "local";
  int ranks = 0;  // 0: every device of the cluster
  double budget_seconds = 10;
  std::string method = "auto";
  std::string out;
  std::string explain;
  int top = 10;
  bool no_pipeline = false, no_tensor = false, no_zero = false, no_recompute = false, no_context = false;
  bool full_simulation = false;
  std::string attention_kernel;  // empty: the cluster's
};

std::string seconds_text(double seconds) {
  return seconds >= 1 ? fmt::format("{:.3f} s", seconds) : fmt::format("{:.3f} ms", seconds * 1e3);
}

std::string bytes_text(double bytes) {
  return bytes >= (1 << 30) ? fmt::format("{:.2f} GiB", bytes / (1 << 30)) : fmt::format("{:.1f} MiB", bytes / (1 << 20));
}

// What the search covered when the budget cut it short; empty when it covered its space.
std::string cut_text(const plan::PlanResult& result) {
  if (!result.budget_exhausted) return "";
  if (result.evaluated >= result.considered)  // the stage search, cut while verifying its best on their Programs
    return fmt::format("the search was cut at the {:g} s budget while replaying its best candidates on their "
                       "Programs (all {} estimated)",
                       result.budget_seconds, result.evaluated);
  const double percent = 100 * result.coverage();
  return fmt::format("the search was cut at the {:g} s budget: it estimated {} of {} candidates ({:.{}f}%)",
                     result.budget_seconds, result.evaluated, result.considered, percent, percent < 10 ? 1 : 0);
}

// On ranks of different speeds: how `best` splits the rows, and the other
// split of the same strategy beside it (plan/speed_split.h).
std::string split_text(const plan::PlanResult& result, const plan::Candidate& best) {
  const plan::Candidate* counterpart = nullptr;  // the same strategy with the other split
  for (const plan::Candidate& c : result.ranked) {
    if (&c == &best || c.strategy.row_shares.empty() == best.strategy.row_shares.empty()) continue;
    parallel::Strategy same = c.strategy;
    same.row_shares = best.strategy.row_shares;
    if (same == best.strategy) counterpart = &c;
  }
  if (best.strategy.row_shares.empty())
    return counterpart == nullptr
               ? std::string()
               : fmt::format("; rows split evenly: by the ranks' speeds ({}) was predicted {:.1f}% slower",
                             plan::shares_text(counterpart->strategy.row_shares),
                             100 * (counterpart->step_seconds / best.step_seconds - 1));
  std::string text = fmt::format("; rows split by the ranks' speeds ({}), so the slow ranks finish their rows with "
                                 "the fast ones",
                                 plan::shares_text(best.strategy.row_shares));
  if (counterpart != nullptr)
    text += fmt::format(": the even split was predicted {:.1f}% slower",
                        100 * (counterpart->step_seconds / best.step_seconds - 1));
  return text;
}

// Why the search chose `best`, for people: the fastest that fits, or the
// simplest of those the prediction cannot tell apart from the fastest.
std::string why_chosen(const plan::PlanResult& result, const plan::Candidate& best) {
  const plan::Candidate& fastest = result.ranked.front();
  std::string why;
  if (&best == &fastest) {
    why = fmt::format("the fastest predicted step of the {} candidates that fit", result.ranked.size());
    if (result.ranked.size() > 1) {
      const plan::Candidate& next = result.ranked[1];
      why += fmt::format("; the next, {}, is {:.1f}% slower", next.description,
                         100 * (next.step_seconds / best.step_seconds - 1));
    }
  } else {
    why = fmt::format("within {:.0f}% of the fastest ({}, {}), which the prediction cannot tell apart, and simpler "
                      "(it stacks {} mechanisms, the fastest {})",
                      100 * plan::kTieTolerance, fastest.description, seconds_text(fastest.step_seconds),
                      plan::complexity(best.strategy), plan::complexity(fastest.strategy));
  }
  why += split_text(result, best);
  if (result.budget_exhausted)
    why += fmt::format(" ({}; a larger --budget-s may find a faster one)", cut_text(result));
  if (!result.rejected.empty())
    why += fmt::format("; {} did not fit (first: {}: {})", result.rejected.size(), result.rejected.front().description,
                       result.rejected.front().rejected);
  return why;
}

// `checked`: the published runs nearest the choice's shape (plan/published_checks.h), or null.
nlohmann::json explain_json(const plan::PlanResult& result, const plan::Candidate& best, const std::string& why,
                            const std::string& cluster, int ranks, const nlohmann::json& checked) {
  auto candidate = [](const plan::Candidate& c) {
    return nlohmann::json{{"description", c.description},
                          {"step_s", c.step_seconds},
                          {"peak_bytes", c.peak_bytes},
                          {"utilization", c.utilization},
                          {"from", c.simulated ? "simulated" : "estimated"}};
  };
  nlohmann::json ranked = nlohmann::json::array(), rejected = nlohmann::json::array();
  for (const plan::Candidate& c : result.ranked) ranked.push_back(candidate(c));
  for (const plan::Candidate& c : result.rejected)
    rejected.push_back({{"description", c.description}, {"reason", c.rejected}});
  nlohmann::json chosen = candidate(best);
  chosen["strategy"] = parallel::to_json(best.strategy);
  return {{"cluster", cluster},     {"ranks", ranks},           {"method", result.method},
          {"seconds", result.seconds}, {"considered", result.considered}, {"evaluated", result.evaluated},
          {"budget_s", result.budget_seconds}, {"cut", result.budget_exhausted}, {"coverage", result.coverage()},
          {"chosen", chosen},       {"why", why},               {"ranked", ranked},
          {"rejected", rejected},   {"checked_runs", checked}};
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  auto pf = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand("plan", "search the fastest strategy that fits a cluster's memory");
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_flags(*cmd, *flags);
  cmd->add_option("--cluster", pf->cluster,
                  "local (this host, after parallax calibrate), dgx-a100, dgx-h100 (optionally :NODES) or a cluster "
                  "JSON file")
      ->capture_default_str();
  cmd->add_option("--ranks", pf->ranks, "ranks to plan for (default: every device of the cluster)");
  cmd->add_option("--budget-s", pf->budget_seconds, "a bound: the search stops at this many seconds with the best strategy found so far, and says how much "
                  "of the space it covered")->capture_default_str();
  cmd->add_option("--method", pf->method,
                  "grid (every candidate replayed), layerwise (each fully-connected layer placed by dynamic "
                  "programming, OptCNN-style), mcmc (per-layer placements by Markov chain Monte Carlo with delta "
                  "simulation, FlexFlow-style), alpa (stage cuts by dynamic programming over per-block costs, for GPTs "
                  "at scale) or auto")
      ->check(CLI::IsMember({"auto", "grid", "layerwise", "mcmc", "alpa"}))
      ->capture_default_str();
  cmd->add_option("--out", pf->out, "write the chosen strategy here (parallax train --strategy FILE runs it)");
  cmd->add_option("--explain", pf->explain,
                  "write the search as JSON here: the choice and why, every candidate ranked, the rejected ones "
                  "and their reasons (parallax report shows it when it is a run directory's plan.json)");
  cmd->add_option("--top", pf->top, "candidates to list")->capture_default_str();
  flags->precision = "auto";
  flags->precision_flag = add_precision_option(
      *cmd, flags->precision,
      "bf16 where a preset's device has bf16 units (the Programs planned are the ones train --precision bf16 "
      "runs); on --cluster local both searched and the faster kept where the CPU and the profile have bf16, else "
      "fp32");
  flags->job.run.threads = 2;
  cmd->add_option("--threads", flags->job.run.threads, "--cluster local, one rank: its kernel threads, as train's")
      ->capture_default_str();
  cmd->add_option("--link-gbps", flags->job.launch.link_gbps, "--cluster local: each rank's link limited, as train's")
      ->capture_default_str();
  cmd->add_flag("--no-pipeline", pf->no_pipeline, "leave pipeline parallelism out of the search");
  cmd->add_flag("--no-tensor", pf->no_tensor, "leave tensor parallelism out of the search");
  cmd->add_flag("--no-zero", pf->no_zero, "leave ZeRO out of the search");
  cmd->add_flag("--no-recompute", pf->no_recompute, "leave recomputation out of the search");
  cmd->add_flag("--no-context", pf->no_context, "leave context parallelism (--cp) out of the search");
  cmd->add_flag("--full-simulation", pf->full_simulation,
                "mcmc: re-simulate every task of every proposal instead of the delta (to compare their rates)");
  cmd->add_option("--attention-kernel", pf->attention_kernel,
                  "the GPU attention kernel the candidates are costed with: flash (the presets' default) or standard "
                  "(as parallax simulate's)")
      ->check(CLI::IsMember({"flash", "standard"}));
  cmd->callback([flags, pf] {
    apply(*flags);
    JobSpec& o = flags->job;
    plan::ClusterSpec cluster = plan::cluster_named(pf->cluster, local_cluster_path());
    if (!pf->attention_kernel.empty()) cluster = plan::with_attention_kernel(std::move(cluster), pf->attention_kernel);
    const int ranks = pf->ranks > 0 ? pf->ranks : cluster.devices();
    if (cluster.devices_share_memory && pf->ranks <= 0)
      fail("--cluster {}: give --ranks (in-process ranks share the host; its {} devices are a limit, not a count)",
           pf->cluster, cluster.devices());
    o.launch.ranks = ranks;
    // One search per precision to compare, each with its share of the budget; the faster best is kept.
    const std::vector<Precision> precisions = precisions_to_model(flags->precision, cluster, true);
    Precision precision = Precision::fp32;
    plan::PlanResult result;
    std::string compared;
    int64_t positions = 0;  // per batch row: tokens of a sequence model, 1 otherwise
    bool first = true;
    for (const Precision candidate : precisions) {
      const std::string word(precision_name(candidate));
      // The mesh, and so each rank's rows, is the search's to choose.
      nn::validate(o.model);
      if (o.data.batch <= 0) fail("batch size {} must be positive", o.data.batch);
      const nn::ModelConfig base = o.model;
      const nn::Model model = nn::build_model(o.model, o.data.batch, true);
      positions = nn::positions_per_row(model);
      const plan::PlanRequest request{
          .build = [base](int64_t batch, int64_t layers) {
            nn::ModelConfig t = base;
            if (layers > 0) t.gpt.n_layer = layers;
            return nn::build_model(t, batch, true);
          },
          .batch_inputs = batch_input_names(model),
          .batch = o.data.batch,
          .ranks = ranks,
          .cluster = &cluster,
          .local = {.threads = ranks > 1 ? 1 : o.run.threads, .link_gbps = o.launch.link_gbps,
                    .collective = o.strategy.collective},
          .overlap = o.run.overlap,
          .optimizer_slots = static_cast<int>(optimizer_slot_names(o.optimizer.update.kind).size()),
          .budget_seconds = pf->budget_seconds / static_cast<double>(precisions.size()),
          .method = pf->method,
          .space = {.tensor = !pf->no_tensor, .context = !pf->no_context, .pipeline = !pf->no_pipeline,
                    .zero = !pf->no_zero, .recompute = !pf->no_recompute, .precision = candidate},
          .mcmc_delta = !pf->full_simulation};
      plan::PlanResult searched = plan::plan(request);
      if (precisions.size() > 1)
        compared += fmt::format("{}{} {}", compared.empty() ? "" : ", ", word,
                                searched.ranked.empty() ? "nothing fits" : seconds_text(searched.best().step_seconds));
      const bool faster = !searched.ranked.empty() &&
                          (result.ranked.empty() || searched.best().step_seconds < result.best().step_seconds);
      if (first || faster) {
        result = std::move(searched);
        precision = candidate;
      }
      first = false;
    }
    const bool bf16 = precision == Precision::bf16;

    const double units = static_cast<double>(o.data.batch * positions);
    int replayed = 0;
    for (const auto* list : {&result.ranked, &result.rejected})
      for (const plan::Candidate& c : *list) replayed += c.simulated;
    if (!compared.empty())
      std::cout << fmt::format("precision: compared the best steps, {}: planned in {}\n", compared, precision_name(precision));
    std::cout << fmt::format("planned {} for batch {} on {} ({} ranks{}) in {:.2f} s: {} search, {} of {} candidates "
                             "estimated, {} replayed on their Programs{}\n",
                             o.model.kind, o.data.batch, pf->cluster, ranks, bf16 ? ", bf16 mixed precision" : "",
                             result.seconds, result.method, result.evaluated, result.considered, replayed,
                             result.budget_exhausted ? "\n  " + cut_text(result) : "");
    std::cout << fmt::format("{:>4}  {:<52} {:>10} {:>12} {:>11} {:>6}  {}\n", "rank", "strategy", "step", 
                             positions > 1 ? "tokens/s" : "samples/s", "mem/device", "util", "from");
    for (size_t i = 0; i < result.ranked.size() && static_cast<int>(i) < pf->top; ++i) {
      const plan::Candidate& c = result.ranked[i];
      const std::string from =
          !c.simulated ? "estimated"
          : c.screened_step_seconds > 0
              ? fmt::format("simulated (screen: {}{})", seconds_text(c.screened_step_seconds),
                            c.screened_peak_bytes > 0 ? ", " + bytes_text(c.screened_peak_bytes) : "")
              : "simulated";
      std::cout << fmt::format("{:>4}  {:<52} {:>10} {:>12.0f} {:>11} {:>5.1f}%  {}\n", i + 1, c.description,
                               seconds_text(c.step_seconds), units / c.step_seconds, bytes_text(c.peak_bytes), 100 * c.utilization,
                               from);
    }
    if (!result.rejected.empty()) {
      std::cout << fmt::format("rejected {} candidates; the closest to fitting:\n", result.rejected.size());
      for (size_t i = 0; i < result.rejected.size() && i < 5; ++i)
        std::cout << fmt::format("  {:<52} {}\n", result.rejected[i].description, result.rejected[i].rejected);
      for (const plan::Candidate& c : result.rejected)
        if (c.simulated && c.screened_step_seconds > 0)  // the stage search's verifications
          std::cout << fmt::format("  {:<52} {} (replayed on its Programs; the screen estimated {})\n",
                                   c.description, c.rejected, bytes_text(c.screened_peak_bytes));
    }
    if (result.proposals > 0)
      std::cout << fmt::format("mcmc: {} proposals, {:.0f} a second with {} simulation\n", result.proposals,
                               result.proposals_per_second, pf->full_simulation ? "full" : "delta");
    const plan::Candidate& best = result.best();
    const std::string why = why_chosen(result, best);
    std::cout << fmt::format("chose {}: {} a step, {} a device\n  why: {}\n", best.description,
                             seconds_text(best.step_seconds), bytes_text(best.peak_bytes), why);
    // On a GPU preset, a GPT: how far off the simulator was on the published runs nearest the choice.
    nlohmann::json checked;
    if (!cluster.profile && o.model.kind == "gpt") {
      const std::vector<plan::CheckedRun> nearest = plan::nearest_checked_runs(plan::run_shape(
          best.strategy, ranks, static_cast<double>(nn::parameter_count(o.model.gpt)), cluster.name));
      checked = plan::checked_json(nearest);
      std::cout << "checked against published runs of similar shape (docs/planner.md):\n"
                << plan::describe_checked(nearest);
    }
    if (!pf->explain.empty()) {
      write_file_atomically(pf->explain, explain_json(result, best, why, pf->cluster, ranks, checked).dump(1) + "\n");
      std::cout << fmt::format("wrote the search to '{}'\n", pf->explain);
    }
    if (!pf->out.empty()) {
      write_file_atomically(pf->out, parallel::to_json(best.strategy).dump(1) + "\n");
      std::cout << fmt::format("wrote the strategy to '{}' (parallax train --strategy {} runs it)\n", pf->out,
                               pf->out);
    }
  });
}

}  // namespace px::cli
