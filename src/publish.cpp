// SPDX-License-Identifier: Apache-2.0
// step.publish: a value the run makes readable outside it (DESIGN §9, docs/messaging.md). It is
// journaled at its place like a step, under the base "[publish:KEY]" (ids.hpp), and the store
// writes the key's latest value in the transaction that journals the entry: a replay meets the
// entry and publishes nothing again.

#include "body_scope.hpp"
#include "engine.hpp"
#include "ids.hpp"
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

}  // namespace durable::detail
