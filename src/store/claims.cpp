// SPDX-License-Identifier: Apache-2.0
// Claims: which runs a worker takes and in what order (the dead owners' first, then lapsed
// leases, then due runs within the workflows' concurrency limits), the lease a claim takes, runs
// quarantined after crashing their workers, and the due queue the worker loop sleeps on.
//
// A run taken over counts one more crashed claim: its owner died (or stopped renewing) while
// holding it. Every run of a crashed batch is suspected alike, since nothing tells which one
// killed the process. A run suspected kIsolateAfter times or more is claimed alone, so that its
// next crash is its own: it alone is charged, and the runs it would have taken down with it go
// on elsewhere. A commit clears the count (the run made progress).

#include <algorithm>
#include <map>
#include <utility>

#include "errors_internal.hpp"
#include "serialization.hpp"
#include "store/flow.hpp"
#include "store/parts.hpp"

namespace durable::detail {

namespace {

// Crashed claims after which a run is claimed alone. Two, not one: a single kill -9 of a worker
// is common and innocent, and its runs are recovered together as fast as before; a batch that
// crashes twice is suspicious.
constexpr int kIsolateAfter = 2;

// Crashed claims from which a run is claimed alone: kIsolateAfter, or fewer when the quarantine
// comes sooner, so that the last crash before it is the run's own.
int isolate_after(const ClaimRequest& request) {
  return request.quarantine_after > 0 ? std::min(kIsolateAfter, request.quarantine_after - 1)
                                      : kIsolateAfter;
}

std::string claim_reason(Status before) {
  switch (before) {
    case Status::pending:
      return "claimed";
    case Status::sleeping:
      return "woke up";
    case Status::waiting:
      return "woke up: the wait timed out";
    default:
      return "taken over: the previous owner's lease lapsed or its process died";
  }
}

// " AND column [NOT] IN (?, ...)", or nothing for an empty list of exclusions.
std::string excluding(const char* column, std::size_t n) {
  if (n == 0) return "";
  return std::string(" AND ") + column + " NOT IN (" + sql::placeholders(n) + ")";
}

}  // namespace

// A run the request may claim, with its status before the claim and its count of crashed
// claims, this one's included when the run is taken over from a dead or lapsed owner; and what
// take() hands the runtime, read with it. (Not read back by the claim's UPDATE: on SQLite,
// RETURNING buffers its rows in a temporary table built at each execution, about 20,000
// instructions a claimed run under callgrind.)
struct Claims::Candidate {
  std::string id;
  Status before = Status::pending;
  int crashes = 0;
  std::string workflow;
  std::string correlation_id;
  std::string traceparent;
  std::int64_t created_at_ms = 0;
  std::string input;
  std::string tags;  // as stored: JSON text, or empty
  int invocations = 0;
  int paused = kNotPaused;  // running: a pause asked for, which its dead owner never made
  std::optional<std::string> flow_key, rate_key;  // as stored (FlowGate)
  bool body_began = false;                        // runs.first_body_at is set
  FlowGate::Stamp stamp;                          // what the gate says to write with the claim

  GatedRun gated() const { return {id, workflow, &input, flow_key, rate_key, body_began}; }
};

namespace {

// The columns a query that finds candidates selects first, in the order candidate() reads them.
constexpr const char* kCandidateColumns =
    "id, crashes, workflow, correlation_id, input, invocations, paused, flow_key, rate_key, "
    "first_body_at, traceparent, created_at, tags";
// How many they are: a query's own columns after them begin at this index.
constexpr int kCandidateColumnCount = 13;

}  // namespace

// The candidate in the current row of a query that selects kCandidateColumns first. Read only
// for a run about to be admitted: SQLite reads a large input's pages only when asked for it.
Claims::Candidate Claims::candidate(sql::Query& row, Status before, int crashes) {
  Candidate run;
  run.id = row.text(0);
  run.before = before;
  run.crashes = crashes;
  run.workflow = row.text(2);
  run.correlation_id = row.text(3);
  run.input = row.text(4);
  run.invocations = row.int32(5);
  run.paused = row.int32(6);
  if (!row.is_null(7)) run.flow_key = row.text(7);
  if (!row.is_null(8)) run.rate_key = row.text(8);
  run.body_began = !row.is_null(9);
  if (!row.is_null(10)) run.traceparent = row.text(10);
  run.created_at_ms = row.int64(11);
  if (!row.is_null(12)) run.tags = row.text(12);
  return run;
}

// The live runs of these workflows but the excluded ones, from the partial index that holds
// them in due order: the runs a claim may take, for next_due, due_count and claim_due alike.
// Its parameters: the workflows, then the excluded ids.
std::string Claims::live_runs(std::size_t workflows, std::size_t excluded) const {
  return "FROM runs" + std::string(t_.db().dialect().claimable_runs_index) + " WHERE " +
         kLiveStatus + of_workflows(workflows) + excluding("id", excluded);
}

// The due runs in the order claims take them: a higher priority first, and within one
// priority the earliest due. Runs of priority 0 (most, mostly all) are read from the index of
// every live run in due order; the others from a partial index of their own, so that no claim
// sorts the due runs.
struct ClaimTier {
  const char* condition;
  const char* order;
  bool prioritized;
};

namespace {
constexpr ClaimTier kTiers[] = {{" AND priority > 0", "priority DESC, due_at", true},
                                {" AND priority = 0", "due_at", false},
                                {" AND priority < 0", "priority DESC, due_at", true}};
}  // namespace

// live_runs() for a tier of claim_due.
std::string Claims::tier_runs(const ClaimTier& tier, std::size_t workflows,
                              std::size_t excluded) const {
  if (!tier.prioritized) return live_runs(workflows, excluded) + tier.condition;
  // The index's predicate first, as written in it: SQLite uses a partial index only then.
  return "FROM runs" + std::string(t_.db().dialect().prioritized_runs_index) +
         " WHERE priority != 0 AND " + kLiveStatus + of_workflows(workflows) +
         excluding("id", excluded) + tier.condition;
}

// A run of no version yet is anyone's: its first claimer stamps it (take()).
std::string Claims::of_workflows(std::size_t workflows) const {
  return " AND workflow IN (" + sql::placeholders(workflows) + ")" +
         (t_.only_own_version() ? " AND (version = ? OR version = '')" : "");
}

int Claims::bind_workflows(sql::Query& query, int index,
                           const std::vector<std::string>& workflows) {
  index = bind_all(query, index, workflows);
  if (t_.only_own_version()) query.bind(index++, t_.version());
  return index;
}

Claimed Claims::claim(const ClaimRequest& request) {
  return t_.guarded([&] {
    Claimed claimed;
    if (request.workflows.empty() || request.limit == 0) return claimed;
    // Relaxed where it may be: a claim lost to a power cut takes every later commit with it, so
    // no step under it was acknowledged, and the run is claimed again the same way. Not so a
    // claim that ends a wait by its timeout: an event that came after the cut would decide the
    // wait the other way, after a body of the timed-out branch ran. That claim is made again,
    // durable.
    for (const sql::Sync sync : {sql::Sync::relaxed, sql::Sync::durable}) {
      sql::Transaction tx(t_.db(), sync);
      const std::vector<Candidate> candidates = claimable(request);
      if (sync == sql::Sync::relaxed &&
          std::any_of(candidates.begin(), candidates.end(),
                      [](const Candidate& c) { return c.before == Status::waiting; })) {
        continue;  // rolled back: nothing was written
      }
      for (const Candidate& candidate : candidates) {
        if (candidate.before == Status::running && candidate.paused != kNotPaused) {
          pause_orphan(candidate, request.now_ms);
        } else if (request.quarantine_after > 0 && candidate.crashes >= request.quarantine_after) {
          quarantine(candidate, request.now_ms);
          claimed.quarantined.push_back(candidate.id);
        } else {
          try {
            claimed.runs.push_back(take(candidate, request));
          } catch (const sql::Failure&) {
            throw;
          } catch (const Error& e) {  // rolled back with the whole claim
            throw UndecodableRun(candidate.id, std::string(message_of(e)));
          }
          claimed.runs.back().alone = candidate.crashes >= isolate_after(request);
        }
      }
      if (candidates.size() < request.limit) {
        std::vector<std::string> excluded = request.executing;
        excluded.insert(excluded.end(), request.set_aside.begin(), request.set_aside.end());
        for (const Claim& c : claimed.runs) excluded.push_back(c.run.id);
        claimed.next_due = earliest_due(request.workflows, excluded);
        claimed.next_due_read = true;
      }
      tx.commit();
      break;
    }
    return claimed;
  });
}

// Runs the request may claim: those of dead owners, then due ones (pending, sleeping or waiting
// whose time came, running whose lease lapsed). A workflow at its concurrency limit gets no more
// runs made running. Where writers run side by side, each row read here is locked, and rows
// another claimer holds are skipped (Dialect::lock_claimable).
std::vector<Claims::Candidate> Claims::claimable(const ClaimRequest& request) {
  std::vector<Candidate> due;
  std::vector<std::string> skip = request.executing;
  skip.insert(skip.end(), request.set_aside.begin(), request.set_aside.end());
  const std::string lock(t_.db().dialect().lock_claimable);
  // Whether to stop here: an isolated run is claimed alone; one met after others is left for a
  // later claim.
  const int isolate = isolate_after(request);
  const auto admit = [&](Candidate candidate) {
    skip.push_back(candidate.id);
    if (candidate.crashes < isolate) {
      due.push_back(std::move(candidate));
      return false;
    }
    if (!due.empty() || !request.executing.empty()) return false;
    due.push_back(std::move(candidate));
    return true;
  };
  // First the runs of dead owners: a restarted process resumes its crashed runs at once, ahead
  // of the queue. A takeover makes no more runs running, so the limits do not apply.
  for (const std::string& owner : request.dead_owners) {
    if (due.size() >= request.limit) break;
    sql::Query orphans(t_.db(), "SELECT " + std::string(kCandidateColumns) +
                                    " FROM runs WHERE status = 'running' AND owner = ? AND "
                                    "due_at > ?" +
                                    of_workflows(request.workflows.size()) +
                                    excluding("id", skip.size()) + " LIMIT ?" + lock);
    int j = 1;
    orphans.bind(j++, owner);
    orphans.bind(j++, request.now_ms);
    j = bind_workflows(orphans, j, request.workflows);
    j = bind_all(orphans, j, skip);
    orphans.bind(j, static_cast<std::int64_t>(request.limit - due.size()));
    while (orphans.next()) {
      if (admit(candidate(orphans, Status::running, orphans.int32(1) + 1))) return due;
    }
  }
  // Then runs whose owner's lease lapsed (a hung or partitioned owner elsewhere): also
  // takeovers, so a workflow at its limit gets them too.
  if (due.size() < request.limit) {
    sql::Query lapsed(t_.db(), "SELECT " + std::string(kCandidateColumns) +
                                   " FROM runs WHERE status = 'running' AND due_at <= ?" +
                                   of_workflows(request.workflows.size()) +
                                   excluding("id", skip.size()) + " ORDER BY due_at LIMIT ?" +
                                   lock);
    int j = 1;
    lapsed.bind(j++, request.now_ms);
    j = bind_workflows(lapsed, j, request.workflows);
    j = bind_all(lapsed, j, skip);
    lapsed.bind(j, static_cast<std::int64_t>(request.limit - due.size()));
    while (lapsed.next()) {
      if (admit(candidate(lapsed, Status::running, lapsed.int32(1) + 1))) return due;
    }
  }
  // The runs of a paused workflow are paused, but for one started while the pause was being
  // made (where writers run side by side): that one is not started either. (A takeover above
  // still is: a run asked to pause is paused by it.)
  ClaimRequest starting = request;
  for (const std::string& name : lifecycle_.read_paused_workflows())
    std::erase(starting.workflows, name);
  if (!starting.workflows.empty()) claim_due(starting, due, skip, admit);
  return due;
}

// Due runs to start or wake, within the limits (FlowGate), after the takeovers. A batch may
// fill up with runs the gate holds back: the query is made again without them.
template <class Admit>
void Claims::claim_due(const ClaimRequest& request, std::vector<Candidate>& due,
                       std::vector<std::string>& skip, const Admit& admit) {
  FlowGate gate(t_.db(), request, [this](const std::string& key) { t_.lock(key); });
  std::vector<std::string> workflows = gate.open(request.workflows);
  for (const ClaimTier& tier : kTiers) {
    while (due.size() < request.limit && !workflows.empty()) {
      sql::Query query(t_.db(), "SELECT " + std::string(kCandidateColumns) + ", status " +
                                    tier_runs(tier, workflows.size(), skip.size()) +
                                    gate.exclusion() + " AND status != 'running' AND due_at <= ? " +
                                    "ORDER BY " + tier.order + " LIMIT ?" +
                                    std::string(t_.db().dialect().lock_claimable));
      int i = bind_workflows(query, 1, workflows);
      i = bind_all(query, i, skip);
      i = gate.bind_exclusion(query, i);
      query.bind(i++, request.now_ms);
      query.bind(i, static_cast<std::int64_t>(request.limit - due.size()));
      bool held = false;
      while (query.next()) {
        const Status status =
            status_from_string(query.text(kCandidateColumnCount)).value_or(Status::pending);
        const int crashes = query.int32(1);
        if (crashes >= isolate_after(request) && (!due.empty() || !request.executing.empty())) {
          skip.push_back(query.text(0));  // claimed alone, by a later claim
          continue;
        }
        Candidate run = candidate(query, status, crashes);
        const GatedRun gated = run.gated();
        const FlowGate::Verdict verdict = gate.check(gated);
        if (verdict != FlowGate::Verdict::admit) {
          held = true;
          // A run whose key is not stored yet is not left out by the gate's condition.
          if (verdict == FlowGate::Verdict::held && !run.flow_key) skip.push_back(run.id);
          continue;
        }
        run.stamp = gate.took(gated);
        if (admit(std::move(run))) return;
      }
      if (!held) break;
      workflows = gate.open(workflows);
    }
  }
}

// Fails a run that crashed its worker request.quarantine_after times, inside claim()'s
// transaction, instead of claiming it again: retried forever, it would kill every worker that
// takes it, first thing after each restart.
void Claims::quarantine(const Candidate& run, std::int64_t now_ms) {
  const std::string message =
      "quarantined: the worker holding this run died " + std::to_string(run.crashes) +
      " times in a row before the run could journal anything (a crash in its workflow code or a "
      "step body: a segmentation fault, an abort, a stack overflow, the out-of-memory killer). "
      "Find the cause in the workers' logs or core dumps, deploy a fix, then retry the run";
  const ErrorInfo error{"durable::Quarantined", with_id(errc::quarantined, message), {}, 0};
  StatusChange change{Move::quarantine, run.id, Status::failed, now_ms, message, run.before};
  change.set_null("owner")
      .set_null("due_at")
      .set("error", t_.error_stored({run.id, run.correlation_id, "error"}, error))
      .set("crashes", std::int64_t{run.crashes});
  if (!lifecycle_.change_status(change)) bug("run " + run.id + " changed while its claim held it");
  waits_.resolve_parent(run.id, Status::failed, std::nullopt, error, now_ms);
}

// A running run asked to pause whose owner died before it could: paused where the owner left
// it, due at once when resumed, instead of being claimed.
void Claims::pause_orphan(const Candidate& run, std::int64_t now_ms) {
  StatusChange change{Move::pause_orphaned, run.id, Status::paused, now_ms, "", run.before};
  change.set("paused_from", std::string("pending")).set("due_at", now_ms).set_null("owner");
  if (!lifecycle_.change_status(change)) bug("run " + run.id + " changed while its claim held it");
}

// Claims one run inside claim()'s transaction: owner and lease, sleeps that are over marked
// completed, the journal loaded, the transition recorded.
Claim Claims::take(const Candidate& candidate, const ClaimRequest& request) {
  const std::string& id = candidate.id;
  const Status before = candidate.before;
  Claim claim;
  claim.lease_until_ms = request.now_ms + request.lease_ms;
  claim.crashes = candidate.crashes;
  {
    // A run of no version yet takes the claimer's (RuntimeOptions::version). And the keys the
    // flow gate found (FlowGate::took), and when the run first began.
    const FlowGate::Stamp& stamp = candidate.stamp;
    StatusChange change{before == Status::running ? Move::take_over : Move::claim,
                        id,
                        Status::running,
                        request.now_ms,
                        claim_reason(before),
                        before};
    change.set("owner", request.owner)
        .set("due_at", claim.lease_until_ms)
        .set("crashes", std::int64_t{candidate.crashes})
        .set_sql("version = CASE WHEN version = '' THEN ? ELSE version END", t_.version());
    if (stamp.flow_key) change.set("flow_key", *stamp.flow_key);
    if (stamp.rate_key) change.set("rate_key", *stamp.rate_key);
    change.set_sql("began_at = coalesce(began_at, ?)", request.now_ms);
    if (!lifecycle_.change_status(change)) bug("run " + id + " vanished while being claimed");
  }
  // The row was read in this transaction, and locked where writers run side by side.
  t_.clear_unreadable();
  claim.run.id = id;
  claim.run.workflow = candidate.workflow;
  claim.run.correlation_id = candidate.correlation_id;
  claim.run.traceparent = candidate.traceparent;
  claim.run.created_at_ms = candidate.created_at_ms;
  claim.run.input = t_.payload({id, candidate.correlation_id, "input"}, candidate.input);
  claim.run.invocations = candidate.invocations;
  if (!candidate.tags.empty()) claim.run.tags = tags_of(t_.stored(candidate.tags));
  // Sleep entries are left sleeping by a sleeping run, or by a resident one (running) that slept
  // in place; wait entries only by a waiting run. A pending run has neither.
  if (before == Status::sleeping || before == Status::running) {
    sql::Query end_sleeps(t_.db(),
                          "UPDATE steps SET state = 'completed', updated_at = ?1 "
                          "WHERE run_id = ?2 AND state = 'sleeping' AND wake_at <= ?1");
    end_sleeps.bind(1, request.now_ms);
    end_sleeps.bind(2, id);
    end_sleeps.run();
  }
  if (before == Status::waiting) waits_.time_out_waits(id, request.now_ms);
  for (JournalEntry& entry : reads_.load_journal(id)) {
    claim.run.invocations = std::max(claim.run.invocations, entry.invocation);
    claim.run.journal.append(std::move(entry));
  }
  claim.run.next_seq = claim.run.journal.size();
  claim.unreadable = t_.take_unreadable();
  return claim;
}

bool Claims::release(const std::string& id, const std::string& owner, std::int64_t now_ms,
                     const std::string& reason) {
  return t_.guarded([&] {
    sql::Transaction tx(t_.db(), sql::Sync::journal);
    // A run asked to pause is paused as it is handed back.
    std::optional<bool> pausing;
    {
      sql::Query row(t_.db(),
                     "SELECT paused FROM runs WHERE id = ? AND status = 'running' AND "
                     "owner = ?" +
                         std::string(t_.db().dialect().lock_row));
      row.bind(1, id);
      row.bind(2, owner);
      if (row.next()) pausing = row.int64(0) != kNotPaused;
    }
    if (!pausing) return false;  // no longer its own: nothing to hand back
    StatusChange change{reason.empty() ? Move::yield : Move::release,
                        id,
                        *pausing ? Status::paused : Status::pending,
                        now_ms,
                        reason,
                        Status::running,
                        owner};
    change.set_null("owner").set("due_at", now_ms);
    if (*pausing) change.set("paused_from", std::string("pending"));
    const bool released = lifecycle_.change_status(change);
    if (released) t_.announce_work();
    tx.commit();
    return released;
  });
}

std::optional<std::int64_t> Claims::next_due(const std::vector<std::string>& workflows,
                                             const std::vector<std::string>& executing) {
  return t_.guarded([&] { return earliest_due(workflows, executing); });
}

std::optional<std::int64_t> Claims::earliest_due(const std::vector<std::string>& workflows,
                                                 const std::vector<std::string>& excluded) {
  if (workflows.empty()) return std::nullopt;
  sql::Query query(t_.db(), "SELECT min(due_at) " + live_runs(workflows.size(), excluded.size()));
  bind_all(query, bind_workflows(query, 1, workflows), excluded);
  if (!query.next() || query.is_null(0)) return std::nullopt;
  return query.int64(0);
}

std::size_t Claims::due_count(const std::vector<std::string>& workflows,
                              const std::vector<std::string>& executing, std::int64_t now_ms,
                              std::size_t limit) {
  return t_.guarded([&]() -> std::size_t {
    if (workflows.empty() || limit == 0) return 0;
    sql::Query query(t_.db(), "SELECT count(*) FROM (SELECT 1 " +
                                  live_runs(workflows.size(), executing.size()) +
                                  " AND due_at <= ? LIMIT ?) AS due");
    int i = bind_all(query, bind_workflows(query, 1, workflows), executing);
    query.bind(i++, now_ms);
    query.bind(i, static_cast<std::int64_t>(limit));
    query.next();
    return static_cast<std::size_t>(query.int64(0));
  });
}

Backlog Claims::backlog(std::int64_t now_ms) {
  return t_.guarded([&] {
    // The due ones only, from the index of live runs by due time: as many as the backlog, however
    // many runs sleep or ended.
    sql::Query query(t_.db(), "SELECT count(*), min(due_at) FROM runs" +
                                  std::string(t_.db().dialect().claimable_runs_index) + " WHERE " +
                                  kLiveStatus + " AND status != 'running' AND due_at <= ?");
    query.bind(1, now_ms);
    Backlog backlog;
    if (query.next()) {
      backlog.depth = static_cast<std::size_t>(query.int64(0));
      if (!query.is_null(1)) backlog.oldest_due_ms = query.int64(1);
    }
    return backlog;
  });
}

}  // namespace durable::detail
