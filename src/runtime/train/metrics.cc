#include "runtime/train/metrics.h"

#include "core/error.h"

namespace px {

MetricsLog::MetricsLog(const std::string& path, bool append) {
  if (path.empty()) return;
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!out_) fail("cannot open metrics file '{}' for writing", path);
}

void MetricsLog::write(const nlohmann::json& line) {
  if (out_.is_open()) out_ << line.dump() << "\n" << std::flush;
}

EvaluationReport report_evaluation(const Evaluation& e, int64_t step) {
  EvaluationReport report{.line = {{"step", step}, {"val_loss", e.loss}},
                          .text = fmt::format("eval at step {}: val_loss {:.4f}", step, e.loss)};
  if (e.accuracy >= 0) {
    report.line["val_accuracy"] = e.accuracy;
    report.text += fmt::format(", val_accuracy {:.2f}%", 100 * e.accuracy);
  }
  return report;
}

}  // namespace px
