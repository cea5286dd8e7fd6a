// relock::PrometheusText: ClientMetrics in Prometheus's text exposition
// format (https://prometheus.io/docs/instrumenting/exposition_formats/).

#include "relock/metrics.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "lib/common/observer.h"

namespace relock {
namespace {

// A label value with \, " and newline escaped.
std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// A float in its shortest form that reads back as the same value.
std::string Number(double v) {
  for (int precision = 6; precision < 17; ++precision) {
    std::string s = absl::StrFormat("%.*g", precision, v);
    double back = 0;
    if (absl::SimpleAtod(s, &back) && back == v) return s;
  }
  return absl::StrFormat("%.17g", v);
}

class Writer {
 public:
  explicit Writer(
      const std::vector<std::pair<std::string, std::string>>& labels) {
    for (const auto& [name, value] : labels) {
      absl::StrAppend(&labels_, labels_.empty() ? "" : ",", name, "=\"",
                      EscapeLabelValue(value), "\"");
    }
  }

  void Counter(absl::string_view name, absl::string_view help, uint64_t v) {
    Header(name, help, "counter");
    Sample(name, {}, absl::StrCat(v));
  }
  void Gauge(absl::string_view name, absl::string_view help, int64_t v) {
    Header(name, help, "gauge");
    Sample(name, {}, absl::StrCat(v));
  }
  void Histogram(absl::string_view name, absl::string_view help,
                 const HistogramSnapshot& h) {
    Header(name, help, "histogram");
    const std::string bucket = absl::StrCat(name, "_bucket");
    if (h.counts.empty()) Sample(bucket, {"le", "+Inf"}, "0");
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.counts.size(); ++i) {
      cumulative += h.counts[i];
      const std::string le =
          i < h.upper_bounds.size() ? Number(h.upper_bounds[i]) : "+Inf";
      Sample(bucket, {"le", le}, absl::StrCat(cumulative));
    }
    Sample(absl::StrCat(name, "_sum"), {},
           Number(absl::ToDoubleSeconds(h.sum)));
    Sample(absl::StrCat(name, "_count"), {}, absl::StrCat(h.count));
  }

  std::string Take() { return std::move(out_); }

 private:
  void Header(absl::string_view name, absl::string_view help,
              absl::string_view type) {
    absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ",
                    type, "\n");
  }
  // A label of one sample besides the client's (a histogram bucket's "le");
  // none when `name` is empty.
  struct Label {
    absl::string_view name;
    std::string value;
  };
  void Sample(absl::string_view name, const Label& extra,
              absl::string_view value) {
    std::string labels = labels_;
    if (!extra.name.empty()) {
      absl::StrAppend(&labels, labels.empty() ? "" : ",", extra.name, "=\"",
                      extra.value, "\"");
    }
    if (labels.empty()) {
      absl::StrAppend(&out_, name, " ", value, "\n");
    } else {
      absl::StrAppend(&out_, name, "{", labels, "} ", value, "\n");
    }
  }

  std::string labels_;
  std::string out_;
};

}  // namespace

const std::vector<double>& WaitTimeBuckets() {
  static const std::vector<double>* const bounds =
      new std::vector<double>(kWaitTimeBounds.begin(), kWaitTimeBounds.end());
  return *bounds;
}

std::string PrometheusText(
    const ClientMetrics& m,
    const std::vector<std::pair<std::string, std::string>>& labels) {
  Writer w(labels);
  w.Counter("relock_acquisitions_total",
            "Acquires that succeeded, re-entries included.", m.acquisitions);
  w.Counter("relock_reentries_total",
            "Acquires that re-entered a hold the owner had.", m.reentries);
  w.Counter("relock_local_reentries_total",
            "Re-entries counted in the client, without a round trip.",
            m.local_reentries);
  w.Counter("relock_acquire_timeouts_total",
            "Acquires that failed with DeadlineExceeded (the lock stayed "
            "held, or Redis did not answer in time).",
            m.acquire_timeouts);
  w.Counter("relock_acquire_failures_total",
            "Acquires that failed with another error.", m.acquire_failures);
  w.Counter("relock_waits_total",
            "Acquires that found the lock held and "
            "waited.",
            m.waits);
  w.Counter("relock_handoffs_total", "Waits that ended with the lock.",
            m.handoffs);
  w.Histogram("relock_wait_seconds",
              "How long acquires that waited waited, until their outcome.",
              m.wait_time);
  w.Counter("relock_releases_total",
            "Releases that succeeded (not those of Close()).", m.releases);
  w.Counter("relock_unlock_failures_total", "Releases that failed.",
            m.unlock_failures);
  w.Counter("relock_renew_rounds_total",
            "Watchdog renewal rounds that sent renewals.", m.renew_rounds);
  w.Counter("relock_renew_round_trips_total",
            "Round trips of the watchdog's renewal rounds.",
            m.renew_round_trips);
  w.Counter("relock_renew_failures_total",
            "Renewal rounds in which some renewal got no answer.",
            m.renew_failures);
  w.Counter("relock_locks_lost_total",
            "Holds reported lost by the watchdog (owner field gone, or not "
            "renewed before the lease ran out).",
            m.locks_lost);
  w.Counter("relock_reconnects_total",
            "Connections opened again after they failed.", m.reconnects);
  w.Gauge("relock_pending_requests",
          "Requests submitted to Redis and not answered yet.",
          m.pending_requests);
  w.Gauge("relock_held_locks", "Holds the client tracks now.", m.held_locks);
  return w.Take();
}

}  // namespace relock
