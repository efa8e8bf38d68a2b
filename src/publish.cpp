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
  const std::string base = published_base(key);
  ReplayCursor::Match match{};
  if (begin_internal(base, StepKind::publish, "step.publish", match) != nullptr) {
    return;  // published already
  }
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
  std::map<std::string, std::string> merged = run_->tags;
  for (const auto& [key, value] : tags) merged[key] = value;
  // Refused before it counts as a call made: the run's tags only grow, so a replay refuses it
  // again, and never one it journaled (its keys are among the run's tags then).
  const auto refuse_new = [&merged] {
    if (merged.size() <= kMaxTags) return;
    throw Error(errc::too_large, "step.set_tags: a run has at most " + std::to_string(kMaxTags) +
                                     " tags; these would give it " +
                                     std::to_string(merged.size()));
  };
  ReplayCursor::Match match{};
  if (begin_internal(kTagsBase, StepKind::tags, "step.set_tags", match, refuse_new) != nullptr) {
    return;  // set already: the run's tags hold them
  }
  JournalEntry set = new_entry(match, std::string(kTagsBase), StepKind::tags);
  set.output = tags;
  std::string reason = step_label(set.key) + " set " + std::to_string(tags.size()) + " tag" +
                       (tags.size() == 1 ? "" : "s");
  run_->tags = std::move(merged);
  journal_completed(std::move(set), std::move(reason));
}

}  // namespace durable::detail
