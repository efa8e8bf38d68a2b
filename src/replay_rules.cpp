// SPDX-License-Identifier: Apache-2.0
#include "replay_rules.hpp"

#include <utility>

#include "body_scope.hpp"
#include "engine.hpp"
#include "ids.hpp"
#include "serialization.hpp"

namespace durable::detail {

std::string call_text(const NewCall& call) {
  return call.tool + "('" + call.key + "')" + (call.site.empty() ? "" : " (at " + call.site + ")");
}

void ReplayRules::note_new(std::string_view key, std::string_view tool,
                           const JournalEntry* retrying) {
  if (retrying == nullptr) refuse_patch_id(key, tool);
  // Nothing unmet now: nothing can be later, as calls only meet entries.
  if (retrying == nullptr && config_.strict && cursor_.went_past()) {
    NewCall call{std::string(key), std::string(tool), call_site(), nullptr};
    if (tool != "step.start" && tool != "step.map") {
      check_strict(call);
    } else if (!parallel_new_) {
      parallel_new_ = std::move(call);
    }
  }
  if (!config_.replay_only || first_new_) return;
  first_new_ = NewCall{std::string(key), std::string(tool), call_site(), retrying};
}

void ReplayRules::check_parallel() {
  if (!parallel_new_) return;
  const NewCall call = std::move(*parallel_new_);
  parallel_new_.reset();
  check_strict(call);
}

void ReplayRules::check_strict(const NewCall& call) {
  const JournalEntry* missed = cursor_.first_unmet();
  if (missed == nullptr) return;
  diverge_strictly(*missed, "the code now calls " + call_text(call) +
                                ", which the journal of run " + run_.id +
                                " does not hold, where the journal holds step '" + missed->key +
                                "', " + describe(*missed) + ", which no call met before it");
}

void ReplayRules::check_end(const json* output) {
  if (!config_.strict) return;
  const JournalEntry* missed = cursor_.first_unmet();
  if (missed == nullptr) return;
  const std::string ends = output != nullptr ? "returned " + shortened_dump(*output)
                                             : "continues as a new run (step.continue_as_new)";
  diverge_strictly(*missed, "the workflow now " + ends + " without calling step '" + missed->key +
                                "', " + describe(*missed) + ", which the journal of run " +
                                run_.id + " holds");
}

void ReplayRules::diverge_strictly(const JournalEntry& missed, std::string what) {
  diverge_with(NonDeterminism(std::move(what) +
                              " (strict replay: the code no longer makes the calls this run "
                              "made). Restore the code the run began on, or put the change "
                              "behind step.patched(); retry() resumes the run once fixed"),
               missed.key);
}

void ReplayRules::diverge(const JournalEntry& entry, std::string_view tool) {
  if (entry.kind == StepKind::patch) patch_id_taken(entry.key, tool);  // a step with its id
  diverge_with(NonDeterminism(step_label(entry.key, run_.id) + " was journaled as " +
                              describe(entry) + ", but the code now calls " + std::string(tool) +
                              " with that id" + at_call_site() +
                              ". Give the new step another id, or restore the old code; retry() "
                              "resumes the run once fixed"),
               entry.key);
}

void ReplayRules::diverge_with(const NonDeterminism& error, std::string key) {
  diverged_site_ = call_site();
  diverged_in_body(error, std::move(key));
  throw error;
}

void ReplayRules::diverged_in_body(const NonDeterminism& error, std::string key) {
  diverged_ = ErrorInfo{"durable::NonDeterminism", error.what(), std::move(key), 0};
}

void ReplayRules::refuse_patch_id(std::string_view key, std::string_view tool) const {
  const std::size_t hash = key.find('#');
  if (hash == std::string_view::npos) return;  // a first use: a patch under it would have matched
  const std::string_view id = key.substr(0, hash);
  const JournalEntry* first = run_.journal.find(id);
  if (first != nullptr && first->kind == StepKind::patch) patch_id_taken(id, tool);
}

void ReplayRules::patch_id_taken(std::string_view id, std::string_view tool) const {
  throw Error(errc::misuse, std::string(tool) + "('" + std::string(id) +
                                "') uses the id of a step.patched of run " + run_.id +
                                at_call_site() +
                                ": a patch's id names the patch alone; give the step "
                                "another id");
}

void ReplayRules::refuse_step_id(std::string_view id, std::string_view tool) const {
  check_step_id(id);
  const JournalEntry* first = run_.journal.find(id);
  if (first == nullptr || first->kind == StepKind::patch) return;
  throw Error(errc::misuse, std::string(tool) + "('" + std::string(id) + "') of run " + run_.id +
                                at_call_site() + ": a step of this run already uses that id (" +
                                describe(*first) + "); a patch's id names the patch alone");
}

}  // namespace durable::detail
