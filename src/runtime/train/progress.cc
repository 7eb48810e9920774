#include "runtime/train/progress.h"

#include <unistd.h>

#include <fmt/format.h>

namespace px {

bool stdout_is_terminal() { return isatty(STDOUT_FILENO) != 0; }

Progress::Progress(int64_t total_steps, int64_t start_step, std::string unit, bool bar, std::ostream& out)
    : total_(total_steps), start_(start_step), unit_(std::move(unit)), bar_(bar), out_(out),
      begin_(std::chrono::steady_clock::now()), last_line_(begin_), last_step_(start_step) {}

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin_).count();
}

static std::string human(double seconds) {
  auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string Progress::status(int64_t step, double loss) const {
  double elapsed = elapsed_seconds();
  double rate = elapsed > 0 ? units_ / elapsed : 0;
  double steps_per_s = elapsed > 0 ? double(step - start_) / elapsed : 0;
  double eta = steps_per_s > 0 ? double(total_ - step) / steps_per_s : 0;
  std::string r = rate >= 1e4 ? fmt::format("{:.1f}k", rate / 1e3) : fmt::format("{:.0f}", rate);
  return fmt::format("step {}/{} | loss {:.4f} | {} {}/s | elapsed {} | ETA {}", step, total_, loss, r, unit_,
                     human(elapsed), human(eta));
}

void Progress::update(int64_t step, double loss, int64_t units) {
  units_ += double(units);
  last_step_ = step;
  auto now = std::chrono::steady_clock::now();
  if (bar_) {
    const int width = 30;
    int filled = total_ > 0 ? static_cast<int>(width * step / total_) : width;
    out_ << "\r[" << std::string(filled, '=') << std::string(width - filled, ' ') << "] " << status(step, loss)
         << "   " << std::flush;
    dirty_ = true;
    return;
  }
  int64_t every = std::max<int64_t>(1, total_ / 20);
  if (step % every == 0 || step == total_ || now - last_line_ > std::chrono::seconds(30)) {
    out_ << status(step, loss) << "\n" << std::flush;
    last_line_ = now;
  }
}

void Progress::message(const std::string& line) {
  if (dirty_) out_ << "\n";
  dirty_ = false;
  out_ << line << "\n" << std::flush;
}

void Progress::finish() {
  if (dirty_) out_ << "\n" << std::flush;
  dirty_ = false;
}

}  // namespace px
