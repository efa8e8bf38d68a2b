// SPDX-License-Identifier: Apache-2.0
// What a run makes known of itself outside it. step.publish: a value readable while it runs
// (DESIGN §9, docs/messaging.md), journaled under the base "[publish:KEY]" (ids.hpp).
// step.set_tags: tags merged into the run's, which run lists filter on, under "[tags]". Each is
// journaled at its place like a step, and the store writes what it makes known in the
// transaction that journals the entry: a replay meets the entry and writes nothing again.

#include "body_scope.hpp"
#include "engine.hpp"
#include "ids.hpp"
#include "run_requests.hpp"
#include "serialization.hpp"

namespace durable::detail {

void Invocation::publish(std::string_view key, json value) {
  if (BodyScope* nested = scope()) nested->refuse("step.publish", key);
  check_published_key(key, "step.publish");
  before_step_call();
  const std::string base = published_base(key);
  ReplayCursor::Match match = cursor_.next_internal(base);
  JournalEntry* entry = match.entry;
  if (entry != nullptr && entry->kind != StepKind::publish) diverge(*entry, "step.publish");
  if (entry == nullptr) note_new(match.key, "step.publish", nullptr);
  flush();  // started steps complete before the value is published, as before any step
  if (entry != nullptr) return;  // published already
  const std::string what = "the value of step.publish('" + std::string(key) + "')";
  storable_text(value, what, config_->max_output_bytes);
  JournalEntry publish = new_entry(match, base, StepKind::publish);
  publish.output = {{"key", key}, {"value", std::move(value)}};
  std::string reason = step_label(publish.key) + " published '" + std::string(key) + "'";
  journal_completed(std::move(publish), std::move(reason));
}

void Invocation::set_tags(std::map<std::string, std::string> tags) {
  if (BodyScope* nested = scope()) nested->refuse("step.set_tags", kTagsBase);
  check_tags(tags);
  before_step_call();
  ReplayCursor::Match match = cursor_.next_internal(kTagsBase);
  JournalEntry* entry = match.entry;
  if (entry != nullptr && entry->kind != StepKind::tags) diverge(*entry, "step.set_tags");
  std::map<std::string, std::string> merged = run_->tags;
  for (const auto& [key, value] : tags) merged[key] = value;
  // Refused before it counts as a call made: the run's tags only grow, so a replay refuses it
  // again, and never one it journaled (its keys are among the run's tags then).
  if (entry == nullptr && merged.size() > kMaxTags) {
    throw Error(errc::too_large, "step.set_tags: a run has at most " + std::to_string(kMaxTags) +
                                     " tags; these would give it " +
                                     std::to_string(merged.size()));
  }
  if (entry == nullptr) note_new(match.key, "step.set_tags", nullptr);
  flush();  // started steps complete before the tags are set, as before any step
  if (entry != nullptr) return;  // set already: the run's tags hold them
  JournalEntry set = new_entry(match, std::string(kTagsBase), StepKind::tags);
  set.output = tags;
  std::string reason = step_label(set.key) + " set " + std::to_string(tags.size()) + " tag" +
                       (tags.size() == 1 ? "" : "s");
  run_->tags = std::move(merged);
  journal_completed(std::move(set), std::move(reason));
}

}  // namespace durable::detail
