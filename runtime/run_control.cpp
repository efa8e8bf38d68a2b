// SPDX-License-Identifier: Apache-2.0
#include "run_control.hpp"

#include "errors_internal.hpp"
#include "replay_check.hpp"
#include "run_requests.hpp"
#include "serialization.hpp"

namespace durable::detail {

void RunControl::cancel(std::string_view run_id, const std::string& reason) {
  if (!c_.writer.alone(
          [&](ControlStore& store) { return store.cancel(std::string(run_id), now_ms(), reason); })) {
    throw no_such_run(run_id);
  }
  log("run.cancelled", "cancel requested", {{"run_id", run_id}});
  c_.closed(std::string(run_id));  // its streams' readers here learn it now
  c_.wake();
}

void RunControl::retry(std::string_view run_id) {
  if (!c_.writer.alone([&](ControlStore& store) { return store.retry(std::string(run_id), now_ms()); })) {
    throw no_such_run(run_id);
  }
  log("run.retried", "retry requested: queued again", {{"run_id", run_id}});
  c_.wake();
}

void RunControl::pause(std::string_view run_id) {
  const std::optional<Status> before =
      c_.writer.alone([&](ControlStore& store) { return store.pause(std::string(run_id), now_ms()); });
  if (!before) throw no_such_run(run_id);
  log("run.pause",
      *before == Status::running ? "pause asked for: the run pauses at its next step"
                                 : "run paused",
      {{"run_id", std::string(run_id)}});
}

void RunControl::resume(std::string_view run_id) {
  const std::optional<Status> before =
      c_.writer.alone([&](ControlStore& store) { return store.resume(std::string(run_id), now_ms()); });
  if (!before) throw no_such_run(run_id);
  log("run.resumed", "run resumed", {{"run_id", std::string(run_id)}});
  c_.wake();
}

std::size_t RunControl::pause_workflow(std::string_view workflow) {
  if (workflow.empty()) throw Error(errc::invalid_argument, "pause_workflow needs a workflow name");
  check_utf8(workflow, "the workflow name");
  const std::size_t paused = c_.writer.alone(
      [&](ControlStore& store) { return store.pause_workflow(std::string(workflow), now_ms()); });
  log("workflow.paused", "workflow paused with " + std::to_string(paused) + " run(s)",
      {{"workflow", std::string(workflow)}});
  return paused;
}

std::size_t RunControl::resume_workflow(std::string_view workflow) {
  if (workflow.empty())
    throw Error(errc::invalid_argument, "resume_workflow needs a workflow name");
  check_utf8(workflow, "the workflow name");
  const std::size_t resumed = c_.writer.alone(
      [&](ControlStore& store) { return store.resume_workflow(std::string(workflow), now_ms()); });
  log("workflow.resumed", "workflow resumed with " + std::to_string(resumed) + " run(s)",
      {{"workflow", std::string(workflow)}});
  c_.wake();
  return resumed;
}

std::vector<std::string> RunControl::paused_workflows() {
  std::vector<std::string> names;
  c_.read([&](ControlStore& store) { names = store.paused_workflows(); });
  return names;
}

WithStore RunControl::bulk_store() {
  return [this](const std::function<void(Store&)>& use) { c_.writer.alone(use); };
}

std::size_t RunControl::count(const RunFilter& filter) {
  std::size_t n = 0;
  c_.read([&](ReadStore& store) { n = store.run_ids(filter, {}).size(); });
  return n;
}

std::size_t RunControl::bulk(BulkAction action, const RunFilter& filter,
                             const std::string& reason) {
  const std::size_t changed =
      bulk_apply(bulk_store(), action, filter, reason, [this] { return now_ms(); });
  log("runs.bulk",
      std::string(to_string(action)) + " by filter: " + std::to_string(changed) + " run(s)",
      {{"action", to_string(action)}, {"runs", changed}});
  if (action != BulkAction::purge) c_.wake();
  return changed;
}

void RunControl::forget(std::string_view correlation_id) {
  const std::vector<std::string> cancelled = c_.writer.alone(
      [&](ControlStore& store) { return store.forget(std::string(correlation_id), now_ms()); });
  log("data.forgotten",
      "the data key of correlation id " + std::string(correlation_id) +
          " was destroyed; its payloads read as forgotten",
      {{"correlation_id", correlation_id}, {"cancelled", cancelled}});
  c_.wake();
}

std::vector<StepProgress> RunControl::progress(std::string_view run_id) {
  const std::string id(run_id);
  std::optional<std::vector<StepProgress>> found;
  c_.read([&](ReadStore& store) {
    if (store.get_run(id, false)) found = store.progress_of(id);
  });
  if (!found) throw no_such_run(run_id);
  return std::move(*found);
}

std::string RunControl::fork(std::string_view run_id, std::string_view from_step) {
  NewRun fork = new_fork(run_id, *c_.env);
  if (!c_.writer.alone([&](ControlStore& store) { return store.fork(fork, std::string(from_step)); })) {
    throw no_such_run(run_id);
  }
  log("run.forked", fork.reason,
      {{"run_id", fork.id}, {"forked_from", run_id}, {"step", from_step}});
  c_.wake();
  return fork.id;
}

void RunControl::resolve(std::string_view run_id, std::string_view step_key, json output,
                         const std::string& reason) {
  const std::string key(step_key);
  const std::string text = resolution_text(run_id, key, output, c_.max_output_bytes);
  const auto check = [&](const RecordedRun& run) { c_.check_resolution(run, key, output); };
  const bool found = c_.writer.alone([&](ControlStore& store) {
    return store.resolve(std::string(run_id), key, text, utf8_or_replaced(reason), now_ms(), check);
  });
  if (!found) throw no_such_run(run_id);
  log("run.resolved", "a failed step was resolved by hand",
      {{"run_id", run_id}, {"step", key}, {"reason", utf8_or_replaced(reason)}});
  c_.wake();
}

}  // namespace durable::detail
