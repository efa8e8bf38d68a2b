// SPDX-License-Identifier: Apache-2.0
#include "telemetry.hpp"

#include "errors_internal.hpp"
#include "run_spans.hpp"

namespace durable::detail {

namespace {
// A log line's "error" field, and its "error_id" when durable's own error failed the step.
void add_error(json& fields, const ErrorInfo& error, bool quoted) {
  fields["error"] = error_said(error, quoted);
  if (const std::string_view id = error_id(error.message); quoted && !id.empty()) {
    fields["error_id"] = id;
  }
}
}  // namespace

Telemetry::Telemetry(const RuntimeOptions& options, Logger& logger, Env& env, bool quotes_errors)
    : options_(options), logger_(logger), env_(&env), quotes_errors_(quotes_errors) {
  start_exporter();
}

void Telemetry::use(Env& env) {
  exporter_.reset();  // its thread, which reads env_, ends first; what it queued is sent
  env_ = &env;
  start_exporter();
}

void Telemetry::start_exporter() {
  if (options_.otlp_endpoint.empty()) return;
  exporter_.reset();  // what an exporter on the Env before queued is sent first
  ops::otlp::ExporterOptions exporter;
  exporter.endpoint = options_.otlp_endpoint;
  exporter.service_version = options_.version;
  exporter.on_error = [this](const std::string& message) {
    logger_.write(LogLevel::warn, "trace.export_failed", message, json::object(), env_->now_ms());
  };
  exporter_ = std::make_unique<ops::otlp::Exporter>(std::move(exporter), *env_);
}

Counters Telemetry::counters() const {
  Counters c;
  c.runs_started = counters_.runs_started;
  c.runs_completed = counters_.runs_completed;
  c.runs_failed = counters_.runs_failed;
  c.steps = counters_.steps;
  c.retries = counters_.retries;
  c.events_sent = counters_.events_sent;
  c.schedule_fires = counters_.schedule_fires;
  if (exporter_) {
    const ops::otlp::ExportStats spans = exporter_->stats();
    c.spans_exported = spans.sent;
    c.spans_dropped = spans.dropped + spans.failed;
  }
  return c;
}

json Telemetry::run_fields(const RunState& run) {
  return {{"run_id", run.id}, {"correlation_id", run.correlation_id}, {"workflow", run.workflow}};
}

// Counts what a commit wrote for a run and logs it: each step at debug (a retry at warn, a step
// failed for good at error), and the run's change of status.
void Telemetry::record(const RunState& run, const std::vector<EntryWrite>* entries,
                       const RunWrite* write) {
  const std::int64_t now = env_->now_ms();
  if (exporter_) {
    try {
      for (ops::otlp::Span& span : finished_spans(run, entries, write, now, quotes_errors_)) {
        exporter_->add(std::move(span));
      }
    } catch (const std::exception& e) {  // what was committed stands; only its spans are lost
      logger_.write(LogLevel::warn, "trace.span_failed", e.what(), run_fields(run), now);
    }
  }
  if (entries != nullptr) {
    for (const EntryWrite& w : *entries) record_entry(run, w, now);
  }
  if (write != nullptr && write->status) record_status(run, *write, now);
}

// The fields of a step's log line. They are made only for a line that is written: record()
// runs for every step.
json Telemetry::step_fields(const RunState& run, const JournalEntry& e) const {
  json fields = run_fields(run);
  fields["step"] = e.key;
  fields["kind"] = to_string(e.kind);
  if (e.state == StepState::retrying || e.state == StepState::failed) {
    fields["attempt"] = e.attempts;
    if (e.error) add_error(fields, *e.error, quotes_errors_);
  }
  return fields;
}

void Telemetry::record_entry(const RunState& run, const EntryWrite& w, std::int64_t now) {
  const JournalEntry& e = w.entry;
  if (w.is_new) ++counters_.steps;
  if (e.kind == StepKind::invoke && e.state == StepState::waiting) ++counters_.runs_started;
  const auto log = [&](LogLevel level, std::string_view event, std::string_view message) {
    if (logger_.enabled(level)) logger_.write(level, event, message, step_fields(run, e), now);
  };
  if (e.state == StepState::retrying) {
    ++counters_.retries;
    log(LogLevel::warn, "step.retrying", "attempt failed; will be retried");
  } else if (e.state == StepState::failed) {
    log(LogLevel::error, "step.failed", "step failed for good");
  } else if (e.kind == StepKind::send) {
    ++counters_.events_sent;
    if (logger_.enabled(LogLevel::info)) {
      json fields = step_fields(run, e);
      fields["event_name"] = e.output.value("name", "");
      logger_.write(LogLevel::info, "event.sent", "event sent by a step", fields, now);
    }
  } else if (logger_.enabled(LogLevel::debug)) {
    log(LogLevel::debug, "step." + std::string(to_string(e.state)), "journaled");
  }
}

void Telemetry::record_status(const RunState& run, const RunWrite& write, std::int64_t now) {
  const Status status = *write.status;
  if (status == Status::completed) {
    ++counters_.runs_completed;
    if (write.successor) ++counters_.runs_started;  // step.continue_as_new
  } else if (status == Status::failed) {
    ++counters_.runs_failed;
  }
  const LogLevel level = status == Status::completed ? LogLevel::info
                         : status == Status::failed  ? LogLevel::error
                                                     : LogLevel::debug;
  if (!logger_.enabled(level)) return;
  json fields = run_fields(run);
  if (status == Status::completed && write.successor) fields["continued_as"] = write.successor->id;
  if (status == Status::failed && write.error) add_error(fields, *write.error, quotes_errors_);
  logger_.write(level, "run." + std::string(to_string(status)), write.reason, fields, now);
}

void Telemetry::report_quarantined(const std::string& id) {
  ++counters_.runs_failed;
  logger_.write(LogLevel::error, "run.quarantined",
                "failed without being claimed again: its workers died " +
                    std::to_string(options_.quarantine_after) +
                    " times in a row while holding it (see the run's error)",
                {{"run_id", id}}, env_->now_ms());
}

}  // namespace durable::detail
