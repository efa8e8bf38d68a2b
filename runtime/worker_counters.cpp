// SPDX-License-Identifier: Apache-2.0
#include "worker_counters.hpp"

#include <nlohmann/json.hpp>

namespace durable::detail {

const std::array<CounterField, 9> kCounterFields = {{
    {"runs_started", &Counters::runs_started,
     "Runs this worker created: its starts, and the runs its events, schedules, invokes and "
     "continue_as_new started."},
    {"runs_completed", &Counters::runs_completed, "Runs this worker executed to completed."},
    {"runs_failed", &Counters::runs_failed, "Runs this worker executed to failed."},
    {"steps", &Counters::steps,
     "Journal entries this worker wrote (steps, sleeps, waits, sends, invokes)."},
    {"retries", &Counters::retries, "Failed step attempts this worker journaled for a retry."},
    {"events_sent", &Counters::events_sent,
     "Events this worker sent: Runtime::send_event and journaled step.send_event."},
    {"schedule_fires", &Counters::schedule_fires, "Runs this worker started from schedules."},
    {"spans_exported", &Counters::spans_exported,
     "Spans the OpenTelemetry collector accepted from this worker "
     "(RuntimeOptions::otlp_endpoint)."},
    {"spans_dropped", &Counters::spans_dropped,
     "Spans this worker lost: the export queue was full, or the collector refused or could not "
     "be reached."},
}};

std::string counters_json(const Counters& counters) {
  nlohmann::json j = nlohmann::json::object();
  for (const CounterField& field : kCounterFields) j[field.name] = counters.*field.value;
  return j.dump();
}

}  // namespace durable::detail
