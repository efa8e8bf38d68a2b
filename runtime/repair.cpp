// SPDX-License-Identifier: Apache-2.0
// An operator's repairs of a run after a bug (docs/versioning.md): fork an ended run from a
// step, so that a fixed build runs it again from there; resolve a failed step by hand, so that
// the run goes on with the output the step should have returned.

#include "replay_check.hpp"
#include "run_requests.hpp"
#include "runtime_core.hpp"
#include "serialization.hpp"

namespace durable::detail {

std::string RuntimeCore::fork(std::string_view run_id, std::string_view from_step) {
  NewRun fork = new_fork(run_id, *env_);
  if (!writer_.alone([&](Store& store) { return store.fork(fork, std::string(from_step)); })) {
    throw no_such_run(run_id);
  }
  logger_.write(LogLevel::info, "run.forked", fork.reason,
                {{"run_id", fork.id}, {"forked_from", run_id}, {"step", from_step}}, now_ms());
  notify_waiters();
  return fork.id;
}

void RuntimeCore::resolve(std::string_view run_id, std::string_view step_key, json output,
                          const std::string& reason) {
  const std::string key(step_key);
  const std::string text = resolution_text(run_id, key, output, options_.max_output_bytes);
  const auto check = [&](const RecordedRun& run) { check_resolution(run, key, output); };
  const bool found = writer_.alone([&](Store& store) {
    return store.resolve(std::string(run_id), key, text, utf8_or_replaced(reason), now_ms(), check);
  });
  if (!found) throw no_such_run(run_id);
  logger_.write(LogLevel::info, "run.resolved", "a failed step was resolved by hand",
                {{"run_id", run_id}, {"step", key}, {"reason", utf8_or_replaced(reason)}},
                now_ms());
  notify_waiters();
}

// Replays the run (as the store's resolve() reads it, in its transaction) as resolve() would
// leave it (the step completed with `output`, the other failed steps to be tried again) against
// the registered code, running no body: a result that does not convert to the type the step
// call asks for fails the replay there.
void RuntimeCore::check_resolution(const RecordedRun& recorded, const std::string& key,
                                   const json& output) {
  const std::shared_ptr<const Workflow> workflow = find_workflow(recorded.info.workflow);
  if (workflow == nullptr || recorded.unreadable) return;  // not checkable here
  std::vector<JournalEntry> journal = recorded.journal;
  bool found = false;
  for (JournalEntry& e : journal) {
    if (e.key == key) {
      // One the store will refuse is left for the store to name.
      if (e.kind != StepKind::run) return;
      if (e.state != StepState::failed && e.state != StepState::retrying) return;
      found = true;
      e.state = StepState::completed;
      e.output = output;
      e.error.reset();
    } else if (e.state == StepState::failed) {
      e.state = StepState::retrying;
    }
  }
  if (!found) return;
  RunInfo run = recorded.info;
  run.status = Status::pending;
  const std::optional<Divergence> divergence = check_replay(*workflow, run, std::move(journal));
  if (!divergence) return;
  throw InvalidInput("resolve of step '" + key + "' of run " + run.id +
                     " refused, nothing written: with that output, the code of workflow '" +
                     run.workflow + "' would not go on: " + divergence->message +
                     (divergence->where.empty() ? "" : " (at " + divergence->where + ")"));
}

}  // namespace durable::detail

namespace durable {

std::string Runtime::fork(std::string_view run_id, std::string_view from_step) {
  return core_->fork(run_id, from_step);
}
void Runtime::resolve(std::string_view run_id, std::string_view step_key, json output,
                      std::string reason) {
  core_->resolve(run_id, step_key, std::move(output), reason);
}

}  // namespace durable
