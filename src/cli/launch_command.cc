// `parallax launch [--max-restarts N] [--ranks R --min-ranks K] -- COMMAND`:
// runs a job (an in-process `parallax train`, or `mpirun ... parallax
// train`) and restarts it when it fails, up to N times, from the latest
// checkpoint (the job's `--save`), with fewer ranks when a rank cannot come
// back (docs/fault_tolerance.md).
//
// The job learns it is restarted from the environment: PARALLAX_ATTEMPT
// (0 first, k after k restarts: `parallax train` then resumes from its
// --save and injects no fault) and PARALLAX_RUN_DIR (its default
// --run-dir: flight records, `lost/rank<R>` marks of ranks that will not
// come back, restarts.jsonl). In COMMAND, `{ranks}`, `{attempt}` and
// `{run_dir}` are replaced by their values for the attempt; an elastic job
// must say where its rank count goes (`mpirun -np {ranks}`, `--ranks
// {ranks}`).
//
// With `--rebalance` (PARALLAX_REBALANCE=1 to the job), a data-parallel
// job whose straggler scores stay skewed ends with a checkpoint and exit
// status 75 and leaves <run dir>/rebalance.json; the launcher restarts it
// from the checkpoint with `--row-shares` appended, the rows in proportion
// to the ranks' measured rates (a rebalance is no failure: --max-restarts
// does not count it).
//
// With `--hosts a:2,b:2` the launcher starts COMMAND itself under mpirun
// on those hosts (`--mpirun` names another launcher, e.g. scripts/hosts.sh's),
// with -np the slots' sum (or --ranks) and the two variables passed on to
// every host: OpenMPI's `--host H -x V`, or MPICH's hydra's `-hosts H
// -envlist V,W` when the launcher is MPICH's (mpiexec.mpich or
// mpiexec.hydra, or hosts.sh's `mpiexec`).
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <fmt/chrono.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "runtime/fault/flight_report.h"
#include "runtime/launch/launch.h"
#include "runtime/train/straggler_watch.h"

namespace px::cli {
namespace {

namespace fs = std::filesystem;

struct LaunchOptions {
  int max_restarts = 3;
  int ranks = 0;      // 0: the command fixes its own rank count
  int min_ranks = 0;  // 0: never fewer than --ranks
  std::string run_dir;
  std::string hosts;              // "a:2,b:2": run COMMAND under mpirun on these hosts
  std::string mpirun = "mpirun";  // the program (and its first words) that starts ranks on them
  std::vector<std::string> command;
  bool rebalance = false;  // restart with rows by the measured rates when the straggler scores stay skewed
};

// A job restarts to be rebalanced at most this many times; then it runs to its end as split.
constexpr int kMaxRebalances = 3;

// `a:2,b:2` -> the slots' sum (a host without `:N` has one).
int host_slots(const std::string& hosts) {
  int total = 0;
  size_t from = 0;
  while (from <= hosts.size()) {
    const size_t comma = std::min(hosts.find(',', from), hosts.size());
    const std::string host = hosts.substr(from, comma - from);
    const size_t colon = host.find(':');
    int slots = 1;
    if (host.empty() || colon == 0) fail("--hosts '{}': expected HOST[:SLOTS],... (e.g. a:2,b:2)", hosts);
    if (colon != std::string::npos) {
      const std::string n = host.substr(colon + 1);
      if (n.empty() || n.size() > 6 || n.find_first_not_of("0123456789") != std::string::npos || std::stoi(n) < 1)
        fail("--hosts '{}': host '{}' has {} slots, expected a count of at least 1", hosts, host.substr(0, colon),
             n.empty() ? "no" : "'" + n + "'");
      slots = std::stoi(n);
    }
    total += slots;
    from = comma + 1;
  }
  return total;
}

// Whether the launcher's words start MPICH's hydra (whose flags differ
// from OpenMPI's mpirun): mpiexec.mpich, mpiexec.hydra, or hosts.sh's
// mpiexec.
bool launches_mpich(const std::vector<std::string>& launcher) {
  for (size_t i = 0; i < launcher.size(); ++i) {
    const std::string name = std::filesystem::path(launcher[i]).filename().string();
    if (name == "mpiexec.mpich" || name == "mpiexec.hydra") return true;
    if (name == "hosts.sh" && i + 1 < launcher.size() && launcher[i + 1] == "mpiexec") return true;
  }
  return false;
}

// The words of `text`, split at spaces (--mpirun "scripts/hosts.sh --name pxf mpirun").
std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

double now_seconds() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

std::string substitute(std::string arg, const std::map<std::string, std::string>& values) {
  for (const auto& [key, value] : values)
    for (size_t at; (at = arg.find(key)) != std::string::npos;) arg.replace(at, key.size(), value);
  return arg;
}

pid_t child_group = 0;                   // the running job's process group, for forwarded signals
volatile std::sig_atomic_t stopped_by = 0;  // SIGINT or SIGTERM the user sent: no restart after it

void forward_signal(int signal) {
  stopped_by = signal;
  if (child_group > 0) ::kill(-child_group, signal);
}

// Runs `args` in its own process group with `env` added; returns its wait status.
int run_job(const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
  std::cout << std::flush;
  const pid_t pid = ::fork();
  if (pid < 0) fail("parallax launch: fork failed: {}", std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::cerr << fmt::format("error: parallax launch: cannot run '{}': {}\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  child_group = pid;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // Whatever the job left behind in its group (mpirun's stragglers) ends with it.
  ::kill(-pid, SIGKILL);
  child_group = 0;
  return status;
}

// Whether `program` runs as execvp would find it (a path, or a name on PATH).
bool runnable(const std::string& program) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/bin:/bin";
  while (!dirs.empty()) {
    const size_t colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    if (::access(((dir.empty() ? "." : dir) + "/" + program).c_str(), X_OK) == 0) return true;
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
  }
  return false;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("exit code {}", WEXITSTATUS(status));
}

// Ranks marked lost for good (`<run_dir>/lost/rank<R>`), cleared for the next attempt.
int take_lost_ranks(const std::string& run_dir) {
  const fs::path lost = fs::path(run_dir) / "lost";
  if (!fs::is_directory(lost)) return 0;
  int n = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(lost)) n += e.is_regular_file();
  fs::remove_all(lost);
  return n;
}

// What the failed attempt's flight records say: the rank that fell behind,
// and how long after its last heartbeat the job ended (detection).
void report_flight(const std::string& run_dir, double ended_at) {
  if (!fs::is_directory(run_dir + "/flight")) return;
  const std::vector<FlightDump> records = read_flight_records(run_dir);
  const FlightDiagnosis d = diagnose(records, static_cast<int64_t>(ended_at * 1e9));
  if (d.behind < 0) return;
  const std::string marker = fmt::format("rank {} fell behind", d.behind);
  const size_t at = d.report.find(marker);
  if (at != std::string::npos) std::cout << "  " << d.report.substr(at, d.report.find('\n', at) - at) << "\n";
  if (d.last_heard_ns > 0)
    std::cout << fmt::format("  detected: the job ended {:.2f} s after rank {}'s last heartbeat\n",
                             ended_at - double(d.last_heard_ns) * 1e-9, d.behind);
}

// The restarts the job recorded (restarts.jsonl: each restart's saved_at
// and ready_at) as the wall time they lost.
double time_lost(const std::string& run_dir, double launched_at) {
  std::ifstream in(run_dir + "/restarts.jsonl");
  std::vector<std::pair<double, double>> spans;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("ready_at")) continue;
    const double saved = j["saved_at"].is_number() ? j["saved_at"].get<double>() : launched_at;
    spans.emplace_back(saved, j["ready_at"].get<double>());
  }
  return restart_time_lost(spans);
}

// The job ended to be rebalanced (its straggler scores stayed skewed,
// runtime/train/straggler_watch.h): the rows its <run dir>/rebalance.json
// gives, as the flags the restart appends.
std::vector<std::string> rebalanced_flags(const std::string& run_dir, double seconds) {
  const std::string path = run_dir + "/rebalance.json";
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!in || j.is_discarded() || !j.contains("row_shares"))
    fail("parallax launch: the job ended to be rebalanced (exit {}) but left no readable '{}'", kRebalanceExitCode,
         path);
  const std::vector<int64_t> shares = j["row_shares"].get<std::vector<int64_t>>();
  std::vector<std::string> compute;
  for (const double s : j["compute_s"].get<std::vector<double>>()) compute.push_back(fmt::format("{:.1f}", s * 1e3));
  std::cout << fmt::format(
      "parallax launch: rebalancing after {:.1f} s at step {}: the ranks' step compute [{}] ms skewed; restarting "
      "from the checkpoint with --row-shares {}\n",
      seconds, j["step"].get<int64_t>(), fmt::join(compute, ", "), fmt::join(shares, ","));
  std::filesystem::remove(path);
  return {"--row-shares", fmt::format("{}", fmt::join(shares, ","))};
}

void launch(LaunchOptions l) {
  if (l.command.empty()) fail("parallax launch: no command after --");
  if (l.min_ranks > 0 && l.ranks == 0) fail("--min-ranks {} needs --ranks (the job's rank count)", l.min_ranks);
  if (l.ranks < 0 || l.min_ranks < 0 || l.min_ranks > l.ranks)
    fail("--min-ranks {} with --ranks {}: expected 0 <= min-ranks <= ranks", l.min_ranks, l.ranks);
  if (l.max_restarts < 0) fail("--max-restarts {} must be >= 0", l.max_restarts);
  bool names_ranks = false;
  for (const std::string& a : l.command) names_ranks = names_ranks || a.find("{ranks}") != std::string::npos;
  if (!l.hosts.empty()) {
    // mpirun -np R --host HOSTS -x ... COMMAND, R from --ranks (elastic) or the slots.
    const int slots = host_slots(l.hosts);
    if (l.ranks > slots)
      fail("--ranks {} with --hosts '{}': the hosts have {} slots", l.ranks, l.hosts, slots);
    std::vector<std::string> job = words(l.mpirun);
    if (job.empty()) fail("--mpirun is empty: expected the program that starts ranks on the hosts (mpirun)");
    const std::string np = l.ranks > 0 ? "{ranks}" : std::to_string(slots);
    const std::vector<std::string> placed =
        launches_mpich(job) ? std::vector<std::string>{"-hosts", l.hosts, "-np", np, "-envlist",
                                                       "PARALLAX_ATTEMPT,PARALLAX_RUN_DIR,PARALLAX_REBALANCE"}
                            : std::vector<std::string>{"--host", l.hosts, "-np", np, "-x", "PARALLAX_ATTEMPT", "-x",
                                                       "PARALLAX_RUN_DIR", "-x", "PARALLAX_REBALANCE"};
    job.insert(job.end(), placed.begin(), placed.end());
    job.insert(job.end(), l.command.begin(), l.command.end());
    l.command = std::move(job);
    names_ranks = true;
  }
  if (l.ranks > 0 && !names_ranks)
    fail("--ranks {}: the command must say where the rank count goes, as {{ranks}} (mpirun -np {{ranks}} or "
         "parallax train --ranks {{ranks}})",
         l.ranks);
  if (!runnable(l.command[0]))
    fail("parallax launch: cannot run '{}': no such executable (a path, or a program on PATH)", l.command[0]);
  if (l.run_dir.empty()) l.run_dir = fmt::format("runs/launch-{:%Y%m%d-%H%M%S}", fmt::localtime(std::time(nullptr)));
  fs::create_directories(l.run_dir);
  fs::remove(l.run_dir + "/restarts.jsonl");
  take_lost_ranks(l.run_dir);
  std::signal(SIGINT, forward_signal);
  std::signal(SIGTERM, forward_signal);
  const double launched_at = now_seconds();
  int ranks = l.ranks;
  int failures = 0, rebalances = 0;
  std::vector<std::string> appended;  // flags a rebalance appends to the command (a repeated flag's last value wins)
  for (int attempt = 0;; ++attempt) {
    if (stopped_by != 0) fail("parallax launch: stopped by signal {} before attempt {}", int(stopped_by), attempt + 1);
    const std::map<std::string, std::string> values{
        {"{ranks}", std::to_string(ranks)}, {"{attempt}", std::to_string(attempt)}, {"{run_dir}", l.run_dir}};
    std::vector<std::string> args;
    for (const std::string& a : l.command) args.push_back(substitute(a, values));
    args.insert(args.end(), appended.begin(), appended.end());
    const double started = now_seconds();
    std::cout << fmt::format("parallax launch: attempt {}{}: {}\n", attempt + 1,
                             ranks > 0 ? fmt::format(" at {} ranks", ranks) : "", fmt::join(args, " "));
    // After kMaxRebalances the job runs to its end as split.
    const bool may_rebalance = l.rebalance && rebalances < kMaxRebalances;
    const int status = run_job(args, {{"PARALLAX_ATTEMPT", std::to_string(attempt)},
                                      {"PARALLAX_RUN_DIR", l.run_dir},
                                      {"PARALLAX_REBALANCE", may_rebalance ? "1" : "0"}});
    const double ended = now_seconds();
    if (may_rebalance && WIFEXITED(status) && WEXITSTATUS(status) == kRebalanceExitCode) {
      appended = rebalanced_flags(l.run_dir, ended - started);
      ++rebalances;
      continue;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      std::cout << fmt::format("parallax launch: done in {:.1f} s; restarts: {}; time lost to failures: {:.2f} s\n",
                               ended - launched_at, attempt, time_lost(l.run_dir, launched_at));
      return;
    }
    if (stopped_by != 0)
      fail("parallax launch: stopped by signal {} ({}); the job ended with {}, not restarted", int(stopped_by),
           strsignal(stopped_by), describe_status(status));
    std::cout << fmt::format("parallax launch: attempt {} failed after {:.1f} s ({})\n", attempt + 1,
                             ended - started, describe_status(status));
    report_flight(l.run_dir, ended);
    const std::string archived = archive_flight_records(l.run_dir, attempt + 1);
    if (!archived.empty()) std::cout << fmt::format("  flight records: parallax doctor {}\n", archived);
    if (const int lost = take_lost_ranks(l.run_dir); lost > 0) {
      if (ranks == 0) fail("{} rank(s) lost for good, but the launch has no --ranks to shrink", lost);
      const int floor = l.min_ranks > 0 ? l.min_ranks : l.ranks;
      if (ranks - lost < floor)
        fail("parallax launch: {} rank{} lost for good leave {}; --min-ranks {} allows no fewer", lost,
             lost == 1 ? "" : "s", ranks - lost, floor);
      ranks -= lost;
      std::cout << fmt::format("  {} rank{} lost for good: continuing at {} ranks\n", lost, lost == 1 ? "" : "s",
                               ranks);
    }
    if (failures++ >= l.max_restarts)
      fail("parallax launch: the job failed {} time{} ({}); --max-restarts {} allows no more", failures,
           failures == 1 ? "" : "s", describe_status(status), l.max_restarts);
  }
}

}  // namespace

void add_launch_command(CLI::App& app) {
  auto l = std::make_shared<LaunchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "run a job and restart it from its latest checkpoint when it fails (elastic with --min-ranks)");
  cmd->add_option("--max-restarts", l->max_restarts, "restarts before giving up")->capture_default_str();
  cmd->add_option("--ranks", l->ranks, "the job's rank count, put where the command says {ranks}");
  cmd->add_option("--min-ranks", l->min_ranks,
                  "continue with fewer ranks, down to K, when ranks are lost for good (default: --ranks)");
  cmd->add_option("--run-dir", l->run_dir,
                  "the run directory: flight records, lost-rank marks, restarts (default runs/launch-<time>)");
  cmd->add_option("--hosts", l->hosts,
                  "run the command under mpirun on these hosts, HOST[:SLOTS],... (-np: the slots, or --ranks)");
  cmd->add_option("--mpirun", l->mpirun,
                  "with --hosts: the program that starts the ranks: OpenMPI's mpirun or one with its flags (e.g. "
                  "\"scripts/hosts.sh mpirun\"), or MPICH's (mpiexec.mpich, \"scripts/hosts.sh mpiexec\")")
      ->capture_default_str();
  cmd->add_flag("--rebalance", l->rebalance,
                "when a data-parallel job's straggler scores stay skewed, it ends with a checkpoint and restarts "
                "from it with rows in proportion to the ranks' measured rates (not counted as a failure)");
  cmd->add_option("command", l->command, "the job, after --: parallax train ... or mpirun ... parallax train ...")
      ->required();
  cmd->callback([l] { launch(*l); });
}

}  // namespace px::cli
