// SPDX-License-Identifier: Apache-2.0
// An operator's repairs of a run after a bug: a failed step completed by hand (resolve), and a
// new run that starts from a copy of an ended run's journal before a step (fork).

#include <algorithm>
#include <utility>

#include "errors_internal.hpp"
#include "store/parts.hpp"

namespace durable::detail {

namespace {

// "charge, ship, notify": the keys of a journal, for a message naming what a run does hold.
std::string keys_of(const std::vector<JournalEntry>& journal) {
  std::string keys;
  for (const JournalEntry& e : journal) {
    if (e.nested) continue;
    if (keys.size() > 200) return keys + ", ...";
    keys += (keys.empty() ? "" : ", ") + e.key;
  }
  return keys.empty() ? "none" : keys;
}

NotFound no_step(const std::string& id, const std::string& key,
                 const std::vector<JournalEntry>& journal) {
  return NotFound("run " + id + " has no step '" + key +
                  "' in its journal (it never reached it); its steps: " + keys_of(journal));
}

}  // namespace

bool Interventions::resolve(const std::string& id, const std::string& key,
                            const std::string& output, const std::string& reason,
                            std::int64_t now_ms, const Store::ResolveCheck& check) {
  return t_.guarded([&] {
    sql::Transaction tx(t_.db());
    const std::optional<Status> run = t_.locked_status(id);
    if (!run) return false;
    t_.clear_unreadable();
    std::vector<JournalEntry> journal = reads_.load_journal(id);
    const auto entry = std::find_if(journal.begin(), journal.end(),
                                    [&](const JournalEntry& e) { return e.key == key; });
    if (entry == journal.end()) throw no_step(id, key, journal);
    const std::string step = "step '" + key + "' of run " + id;
    if (entry->kind != StepKind::run) {
      throw RunStateRefused(step + " is " + describe(*entry) +
                            "; only a step.run can be resolved by hand");
    }
    const bool failed = entry->state == StepState::failed && *run == Status::failed;
    const bool backing_off = entry->state == StepState::retrying &&
                             (*run == Status::pending || *run == Status::sleeping);
    if (!failed && !backing_off) {
      throw RunStateRefused(
          step + " is " + std::string(to_string(entry->state)) + " in a run that is " +
          std::string(to_string(*run)) +
          "; only a step that failed (for good, in a failed run) or waits out a retry backoff "
          "(in a run no worker holds now) can be resolved");
    }
    if (check) {
      std::optional<RunInfo> info = reads_.find_run(id, false);
      check(RecordedRun{std::move(*info), journal, t_.take_unreadable()});
    }
    {
      sql::Query update(t_.db(),
                        "UPDATE steps SET state = 'completed', output = ?, resolved = ?, "
                        "wake_at = NULL, updated_at = ? WHERE run_id = ? AND key = ?");
      update.bind(1, t_.encoded({id, "", step_slot(key, "output")}, output));
      update.bind(2, reason.empty() ? "no reason given" : reason);
      update.bind(3, now_ms);
      update.bind(4, id);
      update.bind(5, key);
      update.run();
    }
    // As retry(): the run's other failed steps (parallel to this one) are tried again.
    requeue(id, *run, now_ms,
            "step '" + key + "' resolved by hand" + (reason.empty() ? "" : ": " + reason));
    tx.commit();
    return true;
  });
}

bool Interventions::fork(NewRun& fork, const std::string& from_key) {
  return t_.guarded([&] {
    sql::Transaction tx(t_.db());
    const std::string& id = fork.forked_from;
    const std::optional<Status> run = t_.locked_status(id);
    if (!run) return false;
    if (!ended(*run)) {
      throw RunStateRefused("run " + id + " is " + std::string(to_string(*run)) +
                            "; only a run that ended (completed, failed or cancelled) can be "
                            "forked");
    }
    t_.clear_unreadable();
    {
      sql::Query original(t_.db(), "SELECT workflow, correlation_id, input FROM runs WHERE id = ?");
      original.bind(1, id);
      original.next();
      fork.workflow = original.text(0);
      fork.correlation_id = original.text(1);
      fork.input = t_.payload_text({id, fork.correlation_id, "input"}, original.text(2));
    }
    Journal journal;
    for (JournalEntry& e : reads_.load_journal(id)) journal.append(std::move(e));
    // A copy would hold the placeholder as if it were the value.
    if (const std::optional<std::string> unreadable = t_.take_unreadable()) {
      throw RunStateRefused("run " + id + " cannot be forked: " + *unreadable);
    }
    const std::vector<JournalEntry> entries(journal.entries().begin(), journal.entries().end());
    const auto from = std::find_if(entries.begin(), entries.end(),
                                   [&](const JournalEntry& e) { return e.key == from_key; });
    if (from == entries.end()) throw no_step(id, from_key, entries);
    if (from->nested) {
      throw RunStateRefused("step '" + from_key + "' of run " + id +
                            " is nested in a step body; fork from the step that contains it");
    }
    // The entries before it that ended, but those of bodies nested in it (written before it,
    // as its body ran): sleeps not over, waits and children not ended begin again in the fork.
    const std::string nested_prefix = from_key + "/";
    std::vector<const JournalEntry*> copies;
    for (auto e = entries.begin(); e != from; ++e) {
      const bool ended = e->state == StepState::completed || e->state == StepState::failed;
      if (ended && e->key.rfind(nested_prefix, 0) != 0) copies.push_back(&*e);
    }
    fork.reason = "forked from run " + id + " at step '" + from_key + "' (" +
                  std::to_string(copies.size()) + " journal entr" +
                  (copies.size() == 1 ? "y" : "ies") + " copied)";
    // The run first: the counts of its entries (step_counts) go to its workflow.
    lifecycle_.insert_run(fork);
    RunWrite write;
    write.run_id = fork.id;
    write.now_ms = fork.now_ms;
    for (std::size_t i = 0; i < copies.size(); ++i) {
      commits_.write_entry(write, EntryWrite{*copies[i], true}, i);
      // A copied publish is one the fork's replays will meet and not make again: its value is
      // the fork's, as of the step it forks from.
      if (copies[i]->kind == StepKind::publish)
        outputs_.write_published(fork.id, *copies[i], fork.now_ms);
      if (copies[i]->kind == StepKind::tags) outputs_.merge_tags(fork.id, *copies[i]);
      // The same for a copied write or close of a stream: the fork's stream holds it.
      if (copies[i]->kind == StepKind::stream) {
        std::optional<std::string> value;
        if (!copies[i]->output.contains("close")) {
          value = copies[i]->output.value("value", json()).dump();
        }
        outputs_.append_stream(fork.id, copies[i]->output.value("stream", ""), value, fork.now_ms);
      }
    }
    tx.commit();
    return true;
  });
}

}  // namespace durable::detail
