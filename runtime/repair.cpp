// SPDX-License-Identifier: Apache-2.0
// The check of a resolve (RunControl::resolve, an Admin's through serve()) against this
// runtime's code: a failed step resolved by hand must leave a run its workflow can go on with.

#include "replay_check.hpp"
#include "runtime_core.hpp"

namespace durable::detail {

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
