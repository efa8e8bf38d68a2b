// SPDX-License-Identifier: Apache-2.0
#include "run_requests.hpp"

#include <algorithm>

#include "durations.hpp"
#include "ids.hpp"
#include "serialization.hpp"

namespace durable::detail {

NewRun new_run(std::string_view workflow, const json& input, const StartOptions& opts,
               std::int64_t now_ms, std::size_t max_bytes) {
  if (workflow.empty()) throw Error("a run needs a workflow name");
  check_utf8(workflow, "the workflow name");
  check_utf8(opts.correlation_id, "the correlation id");
  check_utf8(opts.idempotency_key, "the idempotency key");
  NewRun run;
  // Stored form first: it refuses a value nested too deep before anything copies it.
  run.input =
      storable_text(input, "the input of a run of '" + std::string(workflow) + "'", max_bytes);
  run.id = new_id();
  run.workflow = std::string(workflow);
  run.correlation_id = opts.correlation_id.empty() ? new_id() : opts.correlation_id;
  run.idempotency_key = opts.idempotency_key;
  run.now_ms = now_ms;
  run.due_ms = opts.at ? std::max(now_ms, to_ms(*opts.at)) : now_ms;
  return run;
}

void mark_unregistered(NewRun& run) {
  run.reason = "started; no worker has registered workflow '" + run.workflow +
               "' yet: the run waits for one that has it";
}

NewEvent new_event(std::string_view name, const json& data, std::int64_t now_ms,
                   std::size_t max_bytes) {
  if (name.empty()) throw Error("an event needs a name");
  check_utf8(name, "the event name");
  NewEvent event;
  event.data = storable_text(data, "the data of event '" + std::string(name) + "'", max_bytes);
  event.id = new_id();
  event.name = std::string(name);
  event.now_ms = now_ms;
  return event;
}

NewRun new_fork(std::string_view run_id, std::int64_t now_ms) {
  NewRun fork;
  fork.id = new_id();
  fork.forked_from = std::string(run_id);
  fork.now_ms = fork.due_ms = now_ms;
  return fork;
}

std::string resolution_text(std::string_view run_id, std::string_view key, const json& output,
                            std::size_t max_bytes) {
  return storable_text(output,
                       "the output given to resolve step '" + std::string(key) + "' of run " +
                           std::string(run_id),
                       max_bytes);
}

NotFound no_such_run(std::string_view run_id) {
  return NotFound("no run with id '" + std::string(run_id) + "'");
}

}  // namespace durable::detail
