// SPDX-License-Identifier: Apache-2.0
// A run's writes: its journal entries and its change of status in one transaction, fenced by
// ownership (written only while the run is `running` under the writer), alone or with other
// runs' writes (group commit). Reading a journal back is runs.cpp's.

#include <algorithm>

#include "errors_internal.hpp"
#include "serialization.hpp"
#include "store/parts.hpp"

namespace durable::detail {

namespace {

constexpr const char* kEntryInsert =
    "INSERT INTO steps (run_id, key, seq, base, kind, state, output, error, attempts, wake_at, "
    "invocation, updated_at, duration_ms, started_at, resolved) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)";
// Binds the same 15 parameters as kEntryInsert; the seq (?3) is the entry's first one's, kept.
constexpr const char* kEntryUpdate =
    "UPDATE steps SET base = ?4, kind = ?5, state = ?6, output = ?7, error = ?8, attempts = ?9, "
    "wake_at = ?10, invocation = ?11, updated_at = ?12, duration_ms = coalesce(?13, duration_ms), "
    "started_at = coalesce(?14, started_at), resolved = coalesce(?15, resolved) "
    "WHERE run_id = ?1 AND key = ?2 AND CAST(?3 AS BIGINT) IS NOT NULL";

void bind_optional(sql::Query& query, int index, const std::optional<std::int64_t>& value) {
  if (value) {
    query.bind(index, *value);
  } else {
    query.bind_null(index);
  }
}

}  // namespace

Written Commits::commit(const RunWrite& w) {
  return t_.guarded([&] {
    sql::Transaction tx(t_.db(), sql::Sync::journal);
    const Written written = apply(w);
    if (written == Written::refused) return written;  // rolled back: nothing written
    tx.commit();
    ++write_transactions_;
    return written;
  });
}

namespace {
// A group is as durable as the most durable of its parts: a start is acknowledged to its caller;
// a run's writes are its journal; a beat only says that its worker lives.
sql::Sync sync_of(const WriteGroup& group) {
  if (!group.starts.empty()) return sql::Sync::durable;
  const bool journal =
      !group.writes.empty() || !group.stream_values.empty() || !group.progress.empty();
  return journal ? sql::Sync::journal : sql::Sync::relaxed;
}
}  // namespace

GroupWritten Commits::write_group(const WriteGroup& group) {
  return t_.guarded([&] {
    GroupWritten out;
    sql::Transaction tx(t_.db(), sync_of(group));
    for (const NewRun* run : group.starts) out.ids.push_back(lifecycle_.insert_run(*run));
    for (const RunWrite* w : group.writes) out.written.push_back(apply(*w));
    for (const StreamValue* v : group.stream_values)
      out.streamed.push_back(outputs_.write_stream(*v));
    for (const ProgressWrite* p : group.progress) out.saved.push_back(outputs_.save_progress(*p));
    for (const Beat* b : group.beats) {
      if (b->worker != nullptr) workers_.touch(*b->worker, b->now_ms, b->lease_ms, b->counters);
      workers_.renew_leases(b->owner, b->held, b->until_ms);
    }
    tx.commit();
    const auto took = [](Written w) { return w != Written::refused; };
    if (std::any_of(out.written.begin(), out.written.end(), took)) ++write_transactions_;
    return out;
  });
}

// Writes one run's change inside the caller's transaction, if the run is still running under
// the writer; says how it came out. A pause asked for while the run ran is made by the first
// write at a step boundary that does not end the run: its entries are written, and the run,
// instead of going on, is paused where the write would have left it.
Written Commits::apply(const RunWrite& w) {
  const std::optional<HeldRun> held = held_for(w);
  if (!held) return Written::refused;
  if (w.clear_crashes) {
    sql::Query clear(t_.db(), "UPDATE runs SET crashes = 0 WHERE id = ?");
    clear.bind(1, w.run_id);
    clear.run();
  }
  const bool woke = w.entries != nullptr && write_entries(w, held->gated);
  const bool ends = w.status && ended(*w.status);
  if (held->pausing && !ends) {
    if (!w.boundary) return Written::pausing;
    pause_at_write(w, woke);
    return Written::paused;
  }
  if (w.status) {
    move_run(w, woke, held->has_parent);
  } else if (w.renew_lease) {
    sql::Query renew(t_.db(),
                     "UPDATE runs SET due_at = ?, invocations = ?, updated_at = ? WHERE id = ?");
    renew.bind(1, w.due_ms);
    renew.bind(2, w.invocations);
    renew.bind(3, w.now_ms);
    renew.bind(4, w.run_id);
    renew.run();
  }
  return Written::yes;
}

// The row of a run a write is for, locked until the transaction ends, if the run is still
// running under the writer.
std::optional<Commits::HeldRun> Commits::held_for(const RunWrite& w) {
  sql::Query owner(t_.db(),
                   "SELECT status, coalesce(owner, ''), CASE WHEN parent_id IS NULL THEN 0 "
                   "ELSE 1 END, paused, CASE WHEN rate_key IS NOT NULL AND first_body_at IS "
                   "NULL THEN 1 ELSE 0 END FROM runs WHERE id = ?" +
                       std::string(t_.db().dialect().lock_row));
  owner.bind(1, w.run_id);
  if (!owner.next() || owner.text(0) != "running" || owner.text(1) != w.owner) {
    return std::nullopt;
  }
  return HeldRun{owner.int64(2) != 0, owner.int64(3) != kNotPaused, owner.int64(4) != 0};
}

// Writes a run write's entries, a Step::transaction's run here; returns whether a wait written
// among them was completed at once by an earlier event.
bool Commits::write_entries(const RunWrite& w, bool gated) {
  bool woke = false;
  std::size_t seq = w.first_seq;
  std::optional<std::int64_t> first_body;  // the earliest begin of a body written here
  for (const EntryWrite& given : *w.entries) {
    std::optional<EntryWrite> ran;  // Step::transaction: its body decides the entry, here
    if (given.transaction) ran = run_transaction(given);
    const EntryWrite& e = ran ? *ran : given;
    write_entry(w, e, e.is_new ? seq++ : 0);
    woke = side_effects(w, e) || woke;
    if (e.entry.kind == StepKind::run && e.entry.started_at_ms) {
      const std::int64_t began = *e.entry.started_at_ms;
      first_body = first_body ? std::min(*first_body, began) : began;
    }
  }
  if (gated && first_body) note_first_body(w.run_id, *first_body);
  return woke;
}

// A write that ends or suspends its run (w.status): the run's row, a wait completed meanwhile,
// and its successor or its parent.
void Commits::move_run(const RunWrite& w, bool woke, bool has_parent) {
  const bool ends = ended(*w.status);
  const bool keeps_due =
      (*w.status == Status::sleeping || *w.status == Status::waiting) && w.due_ms != kNever;
  StatusChange change{ends ? Move::end : Move::suspend, w.run_id, *w.status,
                      w.now_ms, w.reason, Status::running, w.owner};
  change.set("due_at", keeps_due ? std::optional(w.due_ms) : std::nullopt)
      .set_null("owner")
      .set("invocations", w.invocations)
      .set("paused", std::int64_t{kNotPaused});
  if (w.output) {
    change.set("output", t_.encoded({w.run_id, "", "output"}, *w.output));
  } else {
    change.set_null("output");
  }
  if (w.error) {
    change.set("error", t_.error_stored({w.run_id, "", "error"}, *w.error));
  } else {
    change.set_null("error");
  }
  if (!lifecycle_.change_status(change))
    bug("run " + w.run_id + " changed under its owner's write");
  if (*w.status == Status::waiting && (woke || !still_waiting(w.run_id))) {
    waits_.wake(w.run_id, w.now_ms, "what it waited for came while the wait was being journaled");
  }
  if (w.successor) {
    continue_as(w.run_id, *w.successor);
  } else if (has_parent && (*w.status == Status::completed || *w.status == Status::failed)) {
    waits_.resolve_parent(w.run_id, *w.status, w.output, w.error, w.now_ms);
  }
}

// A rate-limited run's first step body began at `at_ms` (its entry's started_at): from the
// commit of that entry on, the run counts in its key's window by this time instead of as a
// claimed run that has yet to begin (FlowGate). A body's entry is its first record of having
// begun: until then the run is running, so it is counted all along.
void Commits::note_first_body(const std::string& run_id, std::int64_t at_ms) {
  sql::Query update(t_.db(),
                    "UPDATE runs SET first_body_at = ? WHERE id = ? AND first_body_at IS NULL");
  update.bind(1, at_ms);
  update.bind(2, run_id);
  update.run();
}

// A write at a step boundary of a run asked to pause: the run is paused as the write would have
// left it (sleeping until its wake time, waiting, or due now to go on), holding no owner.
void Commits::pause_at_write(const RunWrite& w, bool woke) {
  Status from = w.status.value_or(Status::pending);
  std::optional<std::int64_t> due = w.now_ms;
  if (from == Status::sleeping) {
    due = w.due_ms;
  } else if (from == Status::waiting) {
    if (woke || !still_waiting(w.run_id)) {
      from = Status::pending;  // what it waited for came already
    } else if (w.due_ms != kNever) {
      due = w.due_ms;
    } else {
      due.reset();
    }
  } else {
    from = Status::pending;
  }
  StatusChange change{Move::pause_at_boundary, w.run_id, Status::paused, w.now_ms,
                      "paused at a step boundary, as asked; resumes " +
                          std::string(to_string(from)),
                      Status::running, w.owner};
  change.set("paused_from", std::string(to_string(from)))
      .set("due_at", due)
      .set_null("owner")
      .set("invocations", w.invocations);
  if (!lifecycle_.change_status(change))
    bug("run " + w.run_id + " changed under its owner's write");
}

// step.continue_as_new: the run that takes over from `id` (completed in this transaction), with
// its parent, whom it answers in its stead: the parent's invoke step now waits on it.
void Commits::continue_as(const std::string& id, NewRun successor) {
  {
    sql::Query parent(t_.db(), "SELECT parent_id, parent_step FROM runs WHERE id = ?");
    parent.bind(1, id);
    if (parent.next() && !parent.is_null(0)) {
      successor.parent_id = parent.text(0);
      successor.parent_step = parent.text(1);
    }
  }
  if (!successor.parent_id.empty()) {
    // Held until this transaction ends: a cancel of the parent, where writers run side by side,
    // either comes first (the parent has ended: no successor, nothing to answer) or after, and
    // then finds the successor among the children it cancels.
    const std::optional<Status> parent = t_.locked_status(successor.parent_id);
    if (!parent || ended(*parent)) return;
    sql::Query waiting(t_.db(),
                       "SELECT output FROM steps WHERE run_id = ? AND key = ? AND "
                       "state = 'waiting'");
    waiting.bind(1, successor.parent_id);
    waiting.bind(2, successor.parent_step);
    const std::string slot = step_slot(successor.parent_step, "output");
    const PayloadAt at{successor.parent_id, "", slot};
    json call = waiting.next() && !waiting.is_null(0) ? t_.payload(at, waiting.text(0)) : json();
    if (call.is_object() && call.value("run", "") == id) {
      call["run"] = successor.id;
      sql::Query update(t_.db(), "UPDATE steps SET output = ? WHERE run_id = ? AND key = ?");
      update.bind(1, t_.encoded(at, call.dump()));
      update.bind(2, successor.parent_id);
      update.bind(3, successor.parent_step);
      update.run();
    }
  }
  lifecycle_.insert_run(successor);
  waits_.carry_messages(id, successor.id);
  sql::Query link(t_.db(), "UPDATE runs SET continued_as = ? WHERE id = ?");
  link.bind(1, successor.id);
  link.bind(2, id);
  link.run();
}

// What a new journal entry does beyond being written: a send publishes its event, a wait is
// registered, a receive takes a message already there, an invoke creates its child, a publish
// stores the key's value, a stream's write or close is applied, a set_tags merges the run's tags.
// Returns whether a wait was completed at once.
bool Commits::side_effects(const RunWrite& w, const EntryWrite& write) {
  const JournalEntry& e = write.entry;
  if (e.kind == StepKind::send && e.state == StepState::completed && write.is_new) {
    NewEvent event;
    event.id = e.output.value("id", "");
    event.name = e.output.value("name", "");
    event.data = e.output.value("data", json::object()).dump();
    event.now_ms = w.now_ms;
    event.correlation_id = t_.correlation_of(w.run_id);
    waits_.publish_in(event);
  } else if (e.kind == StepKind::event && e.state == StepState::waiting) {
    return waits_.register_wait(w.run_id, e, w.now_ms);
  } else if (e.kind == StepKind::receive && e.state == StepState::waiting && write.is_new) {
    return waits_.register_receive(w.run_id, e, w.now_ms);
  } else if (e.kind == StepKind::invoke && e.state == StepState::waiting) {
    waits_.create_child(w.run_id, e, w.now_ms);
  } else if (e.kind == StepKind::publish && write.is_new) {
    outputs_.write_published(w.run_id, e, w.now_ms);
  } else if (e.kind == StepKind::tags && write.is_new) {
    outputs_.merge_tags(w.run_id, e);
  } else if (e.kind == StepKind::stream && write.is_new) {
    // The engine refused a write to a closed stream before journaling it (Host::stream_closed).
    std::optional<std::string> value;
    if (!e.output.contains("close")) value = e.output.value("value", json()).dump();
    outputs_.append_stream(w.run_id, e.output.value("stream", ""), value, w.now_ms);
  }
  return false;
}

bool Commits::still_waiting(const std::string& run_id) {
  sql::Query query(t_.db(), "SELECT 1 FROM steps WHERE run_id = ? AND state = 'waiting' LIMIT 1" +
                                std::string(t_.db().dialect().lock_row));
  query.bind(1, run_id);
  return query.next();
}

void Commits::write_entry(const RunWrite& w, const EntryWrite& write, std::size_t seq) {
  const JournalEntry& e = write.entry;
  sql::Query s(t_.db(), write.is_new ? kEntryInsert : kEntryUpdate);
  s.bind(1, w.run_id);
  s.bind(2, e.key);
  s.bind(3, static_cast<std::int64_t>(seq));
  s.bind(4, e.base);
  s.bind(5, to_string(e.kind));
  s.bind(6, to_string(e.state));
  const bool has_output = e.kind == StepKind::run
                              ? e.state == StepState::completed
                              : e.kind != StepKind::sleep && !e.output.is_null();
  const std::string output_slot = step_slot(e.key, "output");
  if (!has_output) {
    s.bind_null(7);
  } else if (!e.output_text.empty()) {
    s.bind(7, t_.encoded({w.run_id, "", output_slot}, e.output_text));
  } else {
    s.bind(7, t_.encoded({w.run_id, "", output_slot}, e.output.dump()));
  }
  if (e.error) {
    s.bind(8, t_.error_stored({w.run_id, "", step_slot(e.key, "error")}, *e.error));
  } else {
    s.bind_null(8);
  }
  s.bind(9, e.attempts);
  bind_optional(s, 10, e.wake_at_ms);
  s.bind(11, e.invocation);
  s.bind(12, w.now_ms);
  bind_optional(s, 13, e.duration_ms);
  bind_optional(s, 14, e.started_at_ms);
  s.bind_text_or_null(15, e.resolved);
  s.run();
}

}  // namespace durable::detail
