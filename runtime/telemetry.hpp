// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a runtime reports of its work: its counters (Runtime::counters, the heartbeat's), a log
// line for each thing a commit changed (a step journaled, retried or failed; a run completed,
// failed or quarantined), and the spans of what ended (RuntimeOptions::otlp_endpoint).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <durable/info.hpp>
#include <durable/options.hpp>
#include <memory>
#include <string>
#include <vector>

#include "env.hpp"
#include "log.hpp"
#include "otlp_exporter.hpp"
#include "run_model.hpp"
#include "store.hpp"

namespace durable::detail {

class Telemetry {
 public:
  /// `options`, `logger` and `env` outlive it. `quotes_errors`: whether its lines and spans may
  /// quote an error's message (not when a codec encodes the payloads, of which it is one).
  Telemetry(const RuntimeOptions& options, Logger& logger, Env& env, bool quotes_errors);
  Telemetry(const Telemetry&) = delete;
  Telemetry& operator=(const Telemetry&) = delete;

  /// The exporter's thread and clock are `env`'s from now on (RuntimeCore::set_env); what the
  /// one before had queued is sent first.
  void use(Env& env);
  /// Sends what the exporter has queued, and stops it: the runtime closes.
  void close() { exporter_.reset(); }
  /// Waits until every span recorded so far has been sent, refused or dropped.
  void flush() {
    if (exporter_) exporter_->flush();
  }

  Counters counters() const;
  void started(std::size_t runs) { counters_.runs_started += runs; }
  void sent_event() { ++counters_.events_sent; }
  void fired(std::size_t schedules) { counters_.schedule_fires += schedules; }
  void failed(std::size_t runs) { counters_.runs_failed += runs; }

  /// Counts and logs what a commit wrote for a run, and exports the spans of what it ended.
  void record(const RunState& run, const std::vector<EntryWrite>* entries, const RunWrite* write);
  void report_quarantined(const std::string& id);
  /// A log line's fields naming a run.
  static json run_fields(const RunState& run);

 private:
  void record_entry(const RunState& run, const EntryWrite& w, std::int64_t now);
  void record_status(const RunState& run, const RunWrite& write, std::int64_t now);
  json step_fields(const RunState& run, const JournalEntry& e) const;
  void start_exporter();

  const RuntimeOptions& options_;
  Logger& logger_;
  Env* env_;
  bool quotes_errors_;
  struct AtomicCounters {
    std::atomic<std::uint64_t> runs_started{0}, runs_completed{0}, runs_failed{0}, steps{0},
        retries{0}, events_sent{0}, schedule_fires{0};
  };
  AtomicCounters counters_;
  std::unique_ptr<ops::otlp::Exporter> exporter_;  // none without an otlp_endpoint
};

}  // namespace durable::detail
