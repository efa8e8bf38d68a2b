// SPDX-License-Identifier: Apache-2.0
#include "journal.hpp"

#include <array>
#include <utility>

#include "durations.hpp"
#include "errors_internal.hpp"
#include "ids.hpp"
#include "serialization.hpp"

namespace durable::detail {

namespace {
// A field of an entry's JSON output, whatever the output holds (a failed child leaves none).
json field(const JournalEntry& e, const char* name, json fallback = "") {
  return e.output.is_object() ? e.output.value(name, std::move(fallback)) : fallback;
}

std::string text_field(const JournalEntry& e, const char* name) {
  const json value = field(e, name);
  return value.is_string() ? value.get<std::string>() : lenient_dump(value);
}

constexpr std::array<std::string_view, 11> kKindNames = {
    "run", "sleep", "event", "invoke", "send", "value", "patch", "publish", "receive", "stream",
    "tags"};
constexpr std::array<std::string_view, 5> kStateNames = {"completed", "failed", "retrying",
                                                         "sleeping", "waiting"};
template <class E, std::size_t N>
std::optional<E> parse(const std::array<std::string_view, N>& names, std::string_view text) {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == text) return static_cast<E>(i);
  }
  return std::nullopt;
}
}  // namespace

std::string_view to_string(StepKind kind) { return kKindNames.at(static_cast<int>(kind)); }
std::string_view to_string(StepState state) { return kStateNames.at(static_cast<int>(state)); }
std::optional<StepKind> step_kind_from_string(std::string_view text) {
  return parse<StepKind>(kKindNames, text);
}
std::optional<StepState> step_state_from_string(std::string_view text) {
  return parse<StepState>(kStateNames, text);
}

std::string journal_key(std::string_view id, int n) {
  std::string key(id);
  if (n > 1) {
    key.push_back('#');  // not `"#" + to_string(n)`: GCC 12 -O3 gives a false -Wrestrict there
    key += std::to_string(n);
  }
  return key;
}

namespace {
// Whether `key` is journal_key(id, n), without building it.
bool is_key(std::string_view key, std::string_view id, int n) {
  if (key.substr(0, id.size()) != id) return false;
  if (n == 1) return key.size() == id.size();
  const std::string_view rest = key.substr(id.size());
  return rest.size() > 1 && rest.front() == '#' && rest.substr(1) == std::to_string(n);
}
}  // namespace

void Journal::append(JournalEntry entry) {
  const auto [it, inserted] = by_key_.emplace(entry.key, entries_.size());
  if (!inserted) bug("journal key '" + entry.key + "' appended twice");
  const int uses = ++uses_[entry.base];
  entry.in_call_order = is_key(entry.key, entry.base, uses);
  entry.nested = entry.base.find('/') != std::string::npos;  // once, not on every replay
  if (!entry.nested) ++top_level_;
  if (!entry.nested && entry.kind == StepKind::patch) ++markers_;
  entries_.push_back(std::move(entry));
}

void Journal::update(JournalEntry entry) {
  const auto it = by_key_.find(entry.key);
  if (it == by_key_.end()) bug("journal key '" + entry.key + "' updated before it was written");
  entry.nested = entries_[it->second].nested;
  entry.in_call_order = entries_[it->second].in_call_order;
  entries_[it->second] = std::move(entry);
}

void Journal::record(JournalEntry entry, bool is_new) {
  entry.output_text = std::string();
  if (is_new) {
    append(std::move(entry));
  } else {
    update(std::move(entry));
  }
}

JournalEntry* Journal::find(std::string_view key) {
  return const_cast<JournalEntry*>(std::as_const(*this).find(key));
}

const JournalEntry* Journal::find(std::string_view key) const {
  const auto it = by_key_.find(std::string(key));
  return it == by_key_.end() ? nullptr : &entries_[it->second];
}

std::optional<std::size_t> Journal::position(std::string_view key) const {
  const auto it = by_key_.find(std::string(key));
  if (it == by_key_.end()) return std::nullopt;
  return it->second;
}

int Journal::uses_of(std::string_view base) const {
  const auto it = uses_.find(std::string(base));
  return it == uses_.end() ? 0 : it->second;
}

ReplayCursor::Match ReplayCursor::next(std::string_view id, bool check) {
  if (on_track_) {
    // Nested entries sit among the workflow's own; they are found by their bodies, not here.
    while (position_ < journal_->size() && journal_->entries()[position_].nested) ++position_;
    if (position_ < journal_->size()) {
      JournalEntry& expected = const_cast<JournalEntry&>(journal_->entries()[position_]);
      if (expected.base == id && expected.in_call_order) {
        meet(position_++);
        ++matched_;
        return {&expected, {}};
      }
      leave_track();
    } else {
      // Every entry was met in order, so this id's earlier uses are the journal's plus the new
      // ones made in this invocation (parallel steps started in a loop).
      reached_new_ = true;
      const int fresh = ++fresh_[std::string(id)];
      return {nullptr, journal_key(id, journal_->uses_of(id) + fresh)};
    }
  }
  // Off track an id is looked up by the key it makes, so it must not be able to spell another
  // id's key ("a#2"); on track it equalled a journaled id, which was checked when written.
  if (check) check_step_id(id);
  std::string key = journal_key(id, ++uses_[std::string(id)]);
  const std::optional<std::size_t> at = journal_->position(key);
  if (!at) {
    reached_new_ = true;
    return {nullptr, std::move(key)};
  }
  meet(*at);
  ++matched_;
  return {&const_cast<JournalEntry&>(journal_->entries()[*at]), {}};
}

JournalEntry* ReplayCursor::take_marker(std::string_view key) {
  const std::optional<std::size_t> at = journal_->position(key);
  if (!at) return nullptr;
  JournalEntry* entry = &const_cast<JournalEntry&>(journal_->entries()[*at]);
  if (entry->kind != StepKind::patch) return nullptr;
  if (on_track_) {  // step over it where the next call expects it
    while (position_ < journal_->size() && journal_->entries()[position_].nested) ++position_;
    if (position_ == *at) ++position_;
  }
  meet(*at);
  return entry;
}

void ReplayCursor::meet(std::size_t position) {
  if (position >= met_.size() || met_[position]) return;
  met_[position] = true;
  const JournalEntry& entry = journal_->entries()[position];
  if (!entry.nested && entry.kind != StepKind::patch) --unmet_;
}

const JournalEntry* ReplayCursor::first_unmet() const {
  if (unmet_ == 0) return nullptr;
  for (std::size_t i = 0; i < met_.size(); ++i) {
    const JournalEntry& entry = journal_->entries()[i];
    if (!met_[i] && !entry.nested && entry.kind != StepKind::patch) return &entry;
  }
  return nullptr;
}

void ReplayCursor::leave_track() {
  on_track_ = false;
  for (std::size_t i = 0; i < position_; ++i) ++uses_[journal_->entries()[i].base];
}

std::string step_label(std::string_view key, std::string_view run_id) {
  return "step '" + std::string(key) + "' of run " + std::string(run_id);
}

std::string describe(const JournalEntry& e) {
  const std::string attempts =
      e.attempts == 1 ? "1 attempt" : std::to_string(e.attempts) + " attempts";
  switch (e.kind) {
    case StepKind::run:
      switch (e.state) {
        case StepState::completed:
          return "a step.run that returned " + shortened_dump(e.output);
        case StepState::failed:
          return "a step.run that failed for good after " + attempts + " (" + error_text(e.error) +
                 ")";
        default:
          return "a step.run retrying after " + attempts + " (" + error_text(e.error) + ")";
      }
    case StepKind::sleep: {
      const std::string until = e.wake_at_ms ? " until " + utc_text(*e.wake_at_ms, false) : "";
      return "a step.sleep" + until + (e.state == StepState::completed ? ", over" : ", not over");
    }
    case StepKind::event:
      if (e.state == StepState::waiting)
        return "a step.wait_for_event of '" + text_field(e, "event") + "', still waiting";
      if (e.output.is_null()) return "a step.wait_for_event that timed out";
      return "a step.wait_for_event that received '" + text_field(e, "name") + "' with " +
             shortened_dump(field(e, "data", json()));
    case StepKind::invoke: {
      const std::string child = "a step.invoke of '" + text_field(e, "workflow") + "' (child run " +
                                text_field(e, "run") + ")";
      switch (e.state) {
        case StepState::completed:
          return child + " that returned " + shortened_dump(field(e, "output", json()));
        case StepState::failed:
          return child + " that failed (" + error_text(e.error) + ")";
        default:
          return child + ", still running";
      }
    }
    case StepKind::send:
      return "a step.send_event of '" + text_field(e, "name") + "' with " +
             shortened_dump(field(e, "data", json()));
    case StepKind::value:
      if (e.output.is_object() && e.output.size() == 1) {
        const auto it = e.output.begin();
        const bool time = it.key() == "now" && it.value().is_number_integer();
        return "a step." + it.key() + " that gave " +
               (time ? utc_text(it.value().get<std::int64_t>(), true) : shortened_dump(it.value()));
      }
      return "a journaled value " + shortened_dump(e.output);
    case StepKind::patch:
      return "the marker of a step.patched that took the new path";
    case StepKind::publish:
      return "a step.publish of '" + text_field(e, "key") + "' with " +
             shortened_dump(field(e, "value", json()));
    case StepKind::receive:
      if (e.state == StepState::waiting)
        return "a step.receive on '" + text_field(e, "topic") + "', still waiting";
      if (e.output.is_null()) return "a step.receive that timed out";
      return "a step.receive on '" + text_field(e, "topic") + "' that got message " +
             std::to_string(field(e, "seq", 0).get<std::int64_t>()) + ": " +
             shortened_dump(field(e, "message", json()));
    case StepKind::stream:
      if (field(e, "close", false) == true) {
        return "a step.close_stream of '" + text_field(e, "stream") + "'";
      }
      return "a step.write_stream to '" + text_field(e, "stream") + "' of " +
             shortened_dump(field(e, "value", json()));
    case StepKind::tags:
      return "a step.set_tags of " + shortened_dump(e.output);
  }
  return "an entry of an unknown kind";
}

}  // namespace durable::detail
