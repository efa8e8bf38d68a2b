// SPDX-License-Identifier: Apache-2.0
// The step tools that let code change under running runs (docs/versioning.md): step.patched and
// step.deprecate_patch, which keep runs on the path their journal took; the journaled values
// step.now, step.uuid and step.random, which a replay gets back instead of making anew; and
// step.continue_as_new, which hands a long-lived run's work to a new run with a fresh journal.

#include <cstdio>

#include "body_scope.hpp"
#include "engine.hpp"
#include "ids.hpp"
#include "serialization.hpp"

namespace durable::detail {

json Invocation::value(std::string_view id, std::string_view tool,
                       const std::function<json()>& make) {
  const std::string name = "step." + std::string(tool);
  ReplayCursor::Match match;
  if (const JournalEntry* entry = begin_special(id, StepKind::value, name, match)) {
    if (!entry->output.is_object() || !entry->output.contains(tool)) rules_.diverge(*entry, name);
    last_key_ = entry->key;  // for the message of a journaled value that does not convert
    return entry->output.at(tool);
  }
  std::string reason = step_label(match.key) + ": " + name + " journaled";
  JournalEntry made = new_entry(match, id, StepKind::value);
  made.output = {{tool, make()}};
  json value = made.output.at(tool);
  journal_completed(std::move(made), std::move(reason));
  return value;
}

// True where the run's journal holds this patch's marker, or holds nothing this invocation has
// not met (the code is past what was recorded: the new path is safe, and the marker keeps it so
// on every replay). False where the journal holds more without a marker: the run got further on
// code without the patch, and keeps to the old path. Nothing is journaled then.
//
// The first call of an id decides for the whole invocation: a later call of it, further on, would
// find nothing unmet there and take the new path, journaling a marker that the first call then
// finds on the next invocation: an old run turned new half-way (after its wake, or at once when
// resident). So every call of the id gives the first one's answer, and a run that went past the
// first call without the marker never gets one.
bool Invocation::patched(std::string_view id) {
  if (BodyScope* nested = scope()) nested->refuse("step.patched", id);
  before_step_call();
  rules_.refuse_step_id(id, "step.patched");
  if (const auto decided = patches_.find(id); decided != patches_.end()) return decided->second;
  const bool marked = cursor_.take_marker(id) != nullptr;
  const bool taken = marked || !cursor_.went_past();
  patches_.emplace(std::string(id), taken);  // before the marker's write, which may end the call
  if (marked || !taken) return taken;
  ReplayCursor::Match match = cursor_.next(id);
  rules_.note_new(match.key, "step.patched", nullptr);
  flush();  // started steps complete before the marker, as before any other entry
  journal_completed(new_entry(match, id, StepKind::patch),
                    "patch '" + std::string(id) + "' taken: the run follows the new code");
  return true;
}

// The patch's old path is gone from the code: a run holding the marker meets it here, a run
// without one takes the new path as patched() would have given it. Only a run whose journal
// went past this call without the marker cannot go on: it began on code older than the patch.
void Invocation::deprecate_patch(std::string_view id) {
  if (BodyScope* nested = scope()) nested->refuse("step.deprecate_patch", id);
  before_step_call();
  rules_.refuse_step_id(id, "step.deprecate_patch");
  if (const auto decided = patches_.find(id); decided != patches_.end()) {
    if (decided->second) return;
  } else if (cursor_.take_marker(id) != nullptr || !cursor_.went_past()) {
    return;
  }
  rules_.diverge_with(
      NonDeterminism("run " + run_->id + " went past step.deprecate_patch('" + std::string(id) +
                     "')" + at_call_site() +
                     " on code older than the patch, and that code is gone. Finish such "
                     "runs on code that still calls step.patched('" +
                     std::string(id) +
                     "'), then deprecate it; retry() resumes the run once the code can "
                     "replay it"),
      std::string(id));
}

// Ends the invocation, and the run, as completed with no output; the store creates the run that
// takes over in the transaction that writes this ending (RunWrite::successor). Refused, with
// nothing written, for an input the workflow could not be started with.
void Invocation::continue_as_new(json input) {
  if (BodyScope* nested = scope()) nested->refuse("step.continue_as_new", "");
  before_step_call();
  const std::string what = "the input of step.continue_as_new in run " + run_->id;
  storable_text(input, what, config_->max_output_bytes);
  host_->check_child(workflow_->name(), input);
  rules_.check_end(nullptr);
  flush();  // started steps complete before the run does, as before a return
  Outcome outcome;
  outcome.kind = Outcome::Kind::completed;
  outcome.reason = "continued as a new run (step.continue_as_new" + at_call_site() + ")";
  outcome.successor_input = std::move(input);
  end(std::move(outcome));
}

namespace {
// RFC 9562 version 4: 122 random bits, the version nibble 4 and the variant bits 10.
std::string uuid_text(std::uint64_t high, std::uint64_t low) {
  high = (high & ~0xF000ULL) | 0x4000ULL;
  low = (low & ~(0xC000ULL << 48)) | (0x8000ULL << 48);
  char text[37];
  std::snprintf(text, sizeof text, "%08llx-%04llx-%04llx-%04llx-%012llx",
                static_cast<unsigned long long>(high >> 32),
                static_cast<unsigned long long>((high >> 16) & 0xFFFF),
                static_cast<unsigned long long>(high & 0xFFFF),
                static_cast<unsigned long long>(low >> 48),
                static_cast<unsigned long long>(low & 0xFFFFFFFFFFFFULL));
  return text;
}
}  // namespace

json Invocation::now_value(std::string_view id) {
  return value(id, "now", [this] { return json(host_->now_ms()); });
}
json Invocation::uuid_value(std::string_view id) {
  return value(id, "uuid",
               [this] { return json(uuid_text(results_.random_bits(), results_.random_bits())); });
}
json Invocation::random_value(std::string_view id) {
  return value(id, "random", [this] { return json(results_.random_bits()); });
}

}  // namespace durable::detail
