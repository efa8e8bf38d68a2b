// SPDX-License-Identifier: Apache-2.0
// The SQLite store's schema, as the migrations that build it: docs/journal-format.md describes
// each table. A new version appends a migration and raises kSchemaVersion; none is ever edited.

#include "sqlite_schema.hpp"

namespace durable::detail {

const std::array<const char*, kSchemaVersion> kMigrations = {R"sql(
CREATE TABLE runs (
  id              TEXT PRIMARY KEY,
  workflow        TEXT NOT NULL,
  correlation_id  TEXT NOT NULL,
  idempotency_key TEXT,
  status          TEXT NOT NULL,
  input           TEXT NOT NULL,
  output          TEXT,
  error           TEXT,
  invocations     INTEGER NOT NULL DEFAULT 0,
  due_at          INTEGER,
  owner           TEXT,
  created_at      INTEGER NOT NULL,
  updated_at      INTEGER NOT NULL,
  UNIQUE (workflow, idempotency_key)
);
CREATE INDEX runs_due ON runs (status, due_at);
CREATE INDEX runs_workflow ON runs (workflow, status);
CREATE TABLE steps (
  run_id     TEXT NOT NULL,
  key        TEXT NOT NULL,
  seq        INTEGER NOT NULL,
  base       TEXT NOT NULL,
  kind       TEXT NOT NULL,
  state      TEXT NOT NULL,
  output     TEXT,
  error      TEXT,
  attempts   INTEGER NOT NULL DEFAULT 0,
  wake_at    INTEGER,
  invocation INTEGER NOT NULL DEFAULT 0,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE TABLE history (
  id     INTEGER PRIMARY KEY,
  run_id TEXT NOT NULL,
  at     INTEGER NOT NULL,
  status TEXT NOT NULL,
  reason TEXT NOT NULL
);
CREATE INDEX history_run ON history (run_id, id);
CREATE TABLE workers (
  id          TEXT PRIMARY KEY,
  host        TEXT NOT NULL,
  pid         INTEGER NOT NULL,
  start_ticks INTEGER NOT NULL,
  started_at  INTEGER NOT NULL
);
)sql",
                                                             R"sql(
ALTER TABLE runs ADD COLUMN parent_id TEXT;
ALTER TABLE runs ADD COLUMN parent_step TEXT;
CREATE INDEX runs_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX runs_claimable ON runs (due_at)
  WHERE status IN ('pending', 'sleeping', 'waiting', 'running');
CREATE TABLE events (
  seq  INTEGER PRIMARY KEY,
  id   TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  data TEXT NOT NULL,
  at   INTEGER NOT NULL
);
CREATE INDEX events_name ON events (name, seq);
CREATE TABLE waits (
  run_id TEXT NOT NULL,
  key    TEXT NOT NULL,
  event  TEXT NOT NULL,
  match  TEXT NOT NULL,
  since  INTEGER NOT NULL,
  PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE INDEX waits_event ON waits (event);
CREATE TABLE triggers (
  event    TEXT NOT NULL,
  workflow TEXT NOT NULL,
  PRIMARY KEY (event, workflow)
) WITHOUT ROWID;
CREATE TABLE schedules (
  id         TEXT PRIMARY KEY,
  workflow   TEXT NOT NULL,
  input      TEXT NOT NULL,
  every_ms   INTEGER NOT NULL,
  cron       TEXT NOT NULL,
  remaining  INTEGER,
  next_at    INTEGER NOT NULL,
  fired      INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  spec       TEXT NOT NULL
);
CREATE INDEX schedules_due ON schedules (next_at);
)sql",
                                                             R"sql(
ALTER TABLE steps ADD COLUMN duration_ms INTEGER;
CREATE TABLE workflows (
  name    TEXT PRIMARY KEY,
  seen_at INTEGER NOT NULL
) WITHOUT ROWID;
)sql",
                                                             R"sql(
ALTER TABLE runs ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_correlation ON runs (correlation_id);
)sql",
                                                             R"sql(
ALTER TABLE workers ADD COLUMN seen_at INTEGER;
ALTER TABLE workers ADD COLUMN lease_ms INTEGER;
UPDATE workers SET seen_at = started_at;
)sql",
                                                             R"sql(
ALTER TABLE steps ADD COLUMN started_at INTEGER;
)sql",
                                                             R"sql(
-- The same index, its predicate without an IN list: see kLiveStatus in store/tables.hpp.
DROP INDEX runs_claimable;
CREATE INDEX runs_claimable ON runs (due_at)
  WHERE (status = 'pending' OR status = 'sleeping' OR status = 'waiting' OR status = 'running');
)sql",
                                                             R"sql(
-- No table changes: steps.kind may now be 'value' (step.now, step.uuid, step.random) or 'patch'
-- (step.patched's marker), which an older build cannot replay; it refuses the file instead.
)sql",
                                                             R"sql(
-- The version of the code that started (or first ran) a run, the run a fork copied, the run
-- a continue_as_new started, and the operator's reason on a step resolved by hand.
ALTER TABLE runs ADD COLUMN version TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN forked_from TEXT;
ALTER TABLE runs ADD COLUMN continued_as TEXT;
ALTER TABLE steps ADD COLUMN resolved TEXT;
)sql",
                                                             R"sql(
-- Run control: priorities, deadlines, tags, and pauses of runs and workflows.
ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN deadline_at INTEGER;
ALTER TABLE runs ADD COLUMN tags TEXT;
ALTER TABLE runs ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN paused_from TEXT;
CREATE INDEX runs_prioritized ON runs (priority DESC, due_at)
  WHERE priority != 0 AND
        (status = 'pending' OR status = 'sleeping' OR status = 'waiting' OR status = 'running');
CREATE INDEX runs_deadline ON runs (deadline_at)
  WHERE deadline_at IS NOT NULL AND (status = 'pending' OR status = 'sleeping' OR
        status = 'waiting' OR status = 'running' OR status = 'paused');
CREATE INDEX runs_paused ON runs (workflow) WHERE status = 'paused';
CREATE TABLE run_tags (
  run_id TEXT NOT NULL,
  key    TEXT NOT NULL,
  value  TEXT NOT NULL,
  PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE INDEX run_tags_value ON run_tags (key, value);
CREATE TABLE paused_workflows (
  name TEXT PRIMARY KEY,
  at   INTEGER NOT NULL
) WITHOUT ROWID;
)sql",
                                                             R"sql(
-- Flow control: a run's concurrency and rate-limit keys, when it first began, and the keys'
-- pointers of each workflow, for whoever creates its runs.
ALTER TABLE runs ADD COLUMN flow_key TEXT;
ALTER TABLE runs ADD COLUMN rate_key TEXT;
ALTER TABLE runs ADD COLUMN began_at INTEGER;
ALTER TABLE workflows ADD COLUMN flow TEXT;
CREATE INDEX runs_running_keys ON runs (workflow, flow_key) WHERE status = 'running';
CREATE INDEX runs_began ON runs (workflow, rate_key, began_at) WHERE rate_key IS NOT NULL;
)sql",
                                                             R"sql(
-- Debounce: the key of a run that waits for newer starts of its key. Retention: the ended runs
-- by their last change.
ALTER TABLE runs ADD COLUMN debounce_key TEXT;
CREATE INDEX runs_debounce ON runs (workflow, debounce_key)
  WHERE status = 'pending' AND debounce_key IS NOT NULL;
CREATE INDEX runs_ended ON runs (updated_at)
  WHERE (status = 'completed' OR status = 'failed' OR status = 'cancelled');
)sql",
                                                             R"sql(
-- The progress a step's body last reported (StepContext::heartbeat), for its next attempt.
CREATE TABLE step_progress (
  run_id   TEXT NOT NULL,
  step_key TEXT NOT NULL,
  attempt  INTEGER NOT NULL,
  progress TEXT NOT NULL,
  at       INTEGER NOT NULL,
  PRIMARY KEY (run_id, step_key)
) WITHOUT ROWID;
)sql",
                                                             R"sql(
-- Traces: the W3C trace context a run joins (its caller's, or its parent run's invoke step).
ALTER TABLE runs ADD COLUMN traceparent TEXT;
)sql",
                                                             R"sql(
-- What each worker counted since it started (Runtime::counters), as JSON written by its
-- heartbeat, for /metrics.
ALTER TABLE workers ADD COLUMN counters TEXT;
)sql",
                                                             R"sql(
-- Reads that cost the same at a million runs as at a thousand (docs/journal-format.md).
-- Runs by workflow and status, kept by triggers in the transaction that changes a run.
CREATE TABLE run_counts (
  workflow TEXT NOT NULL,
  status   TEXT NOT NULL,
  runs     INTEGER NOT NULL,
  PRIMARY KEY (workflow, status)
) WITHOUT ROWID;
INSERT INTO run_counts SELECT workflow, status, count(*) FROM runs GROUP BY workflow, status;
CREATE TRIGGER runs_counted AFTER INSERT ON runs BEGIN
  INSERT INTO run_counts VALUES (NEW.workflow, NEW.status, 1)
    ON CONFLICT DO UPDATE SET runs = runs + 1;
END;
CREATE TRIGGER runs_recounted AFTER UPDATE OF workflow, status ON runs
  WHEN NEW.workflow != OLD.workflow OR NEW.status != OLD.status BEGIN
  UPDATE run_counts SET runs = runs - 1 WHERE workflow = OLD.workflow AND status = OLD.status;
  INSERT INTO run_counts VALUES (NEW.workflow, NEW.status, 1)
    ON CONFLICT DO UPDATE SET runs = runs + 1;
END;
CREATE TRIGGER runs_uncounted AFTER DELETE ON runs BEGIN
  UPDATE run_counts SET runs = runs - 1 WHERE workflow = OLD.workflow AND status = OLD.status;
END;
-- What each step.run entry adds to its workflow's and step's totals, in the duration bucket of
-- its last attempt (-1: none measured; i: at most step_buckets' i-th bound; one past the last:
-- over every bound). Of n attempts, all failed but a completed entry's last; they were retried
-- n - 1 times, or n times while the next attempt is still to come. retry() sets attempts back to
-- 0, and max(…, 0) keeps such an entry from counting less than nothing.
CREATE TABLE step_buckets (upper_ms INTEGER PRIMARY KEY);
INSERT INTO step_buckets VALUES (1), (5), (10), (25), (50), (100), (250), (500), (1000), (2500),
  (5000), (10000), (30000), (60000);
CREATE VIEW step_figures AS
SELECT s.run_id, s.key, r.workflow, s.base AS step,
       CASE WHEN s.duration_ms IS NULL THEN -1
            ELSE (SELECT count(*) FROM step_buckets WHERE upper_ms < s.duration_ms) END AS bucket,
       1 AS entries,
       max(s.attempts - (s.state = 'completed'), 0) AS failed_attempts,
       max(s.attempts - (s.state != 'retrying'), 0) AS retries,
       s.state = 'failed' AS failed,
       coalesce(s.duration_ms, 0) AS duration_ms
FROM steps s JOIN runs r ON r.id = s.run_id WHERE s.kind = 'run';
CREATE TABLE step_counts (
  workflow        TEXT NOT NULL,
  step            TEXT NOT NULL,
  bucket          INTEGER NOT NULL,
  entries         INTEGER NOT NULL,
  failed_attempts INTEGER NOT NULL,
  retries         INTEGER NOT NULL,
  failed          INTEGER NOT NULL,
  duration_ms     INTEGER NOT NULL,
  PRIMARY KEY (workflow, step, bucket)
) WITHOUT ROWID;
INSERT INTO step_counts
  SELECT workflow, step, bucket, sum(entries), sum(failed_attempts), sum(retries), sum(failed),
         sum(duration_ms)
  FROM step_figures GROUP BY workflow, step, bucket;
-- An entry's figures are taken out before it changes and added back after.
CREATE TRIGGER steps_counted AFTER INSERT ON steps WHEN NEW.kind = 'run' BEGIN
  INSERT INTO step_counts
    SELECT workflow, step, bucket, entries, failed_attempts, retries, failed, duration_ms
    FROM step_figures WHERE run_id = NEW.run_id AND key = NEW.key
    ON CONFLICT DO UPDATE SET entries = entries + excluded.entries,
      failed_attempts = failed_attempts + excluded.failed_attempts,
      retries = retries + excluded.retries, failed = failed + excluded.failed,
      duration_ms = duration_ms + excluded.duration_ms;
END;
CREATE TRIGGER steps_uncounted BEFORE DELETE ON steps WHEN OLD.kind = 'run' BEGIN
  UPDATE step_counts SET entries = step_counts.entries - f.entries,
    failed_attempts = step_counts.failed_attempts - f.failed_attempts,
    retries = step_counts.retries - f.retries, failed = step_counts.failed - f.failed,
    duration_ms = step_counts.duration_ms - f.duration_ms
  FROM (SELECT * FROM step_figures WHERE run_id = OLD.run_id AND key = OLD.key) AS f
  WHERE step_counts.workflow = f.workflow AND step_counts.step = f.step AND
        step_counts.bucket = f.bucket;
END;
CREATE TRIGGER steps_changing BEFORE UPDATE OF kind, base, state, attempts, duration_ms ON steps
  WHEN OLD.kind = 'run' BEGIN
  UPDATE step_counts SET entries = step_counts.entries - f.entries,
    failed_attempts = step_counts.failed_attempts - f.failed_attempts,
    retries = step_counts.retries - f.retries, failed = step_counts.failed - f.failed,
    duration_ms = step_counts.duration_ms - f.duration_ms
  FROM (SELECT * FROM step_figures WHERE run_id = OLD.run_id AND key = OLD.key) AS f
  WHERE step_counts.workflow = f.workflow AND step_counts.step = f.step AND
        step_counts.bucket = f.bucket;
END;
CREATE TRIGGER steps_changed AFTER UPDATE OF kind, base, state, attempts, duration_ms ON steps
  WHEN NEW.kind = 'run' BEGIN
  INSERT INTO step_counts
    SELECT workflow, step, bucket, entries, failed_attempts, retries, failed, duration_ms
    FROM step_figures WHERE run_id = NEW.run_id AND key = NEW.key
    ON CONFLICT DO UPDATE SET entries = entries + excluded.entries,
      failed_attempts = failed_attempts + excluded.failed_attempts,
      retries = retries + excluded.retries, failed = failed + excluded.failed,
      duration_ms = duration_ms + excluded.duration_ms;
END;
-- Newest-first lists, each answered from an index in order: every run, by status, by workflow
-- (with a status or without), by correlation id. The row id breaks ties of created_at.
DROP INDEX runs_due;
DROP INDEX runs_workflow;
DROP INDEX runs_correlation;
CREATE INDEX runs_newest ON runs (created_at);
CREATE INDEX runs_status ON runs (status, created_at);
CREATE INDEX runs_workflow ON runs (workflow, created_at);
CREATE INDEX runs_workflow_status ON runs (workflow, status, created_at);
CREATE INDEX runs_correlation ON runs (correlation_id, created_at);
)sql",
                                                             R"sql(
-- The state history keyed by run: one B-tree where a table and its index (history_run) were,
-- which held each row's run id twice. A run's next id is its greatest plus one (add_history);
-- the rows copied here keep theirs.
CREATE TABLE history_by_run (
  run_id TEXT NOT NULL,
  id     INTEGER NOT NULL,
  at     INTEGER NOT NULL,
  status TEXT NOT NULL,
  reason TEXT NOT NULL,
  PRIMARY KEY (run_id, id)
) WITHOUT ROWID;
INSERT INTO history_by_run SELECT run_id, id, at, status, reason FROM history;
DROP TABLE history;
ALTER TABLE history_by_run RENAME TO history;
)sql",
                                                             R"sql(
-- The values runs publish (Step::publish): the latest per key, its version counting the writes.
CREATE TABLE published (
  run_id     TEXT NOT NULL,
  key        TEXT NOT NULL,
  value      TEXT NOT NULL,
  version    INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
-- A mailbox per run (Runtime::send, step.receive): each message kept until a receive of its run
-- takes it, in the order sent (seq); received_by is the key of the receive's journal entry.
CREATE TABLE messages (
  seq         INTEGER PRIMARY KEY,
  run_id      TEXT NOT NULL,
  topic       TEXT NOT NULL,
  data        TEXT NOT NULL,
  sent_at     INTEGER NOT NULL,
  received_by TEXT
);
CREATE INDEX messages_run ON messages (run_id, topic, seq);
-- Runs' streams (Step::write_stream): each one's length and whether the run closed it (a run's
-- end closes them too: readers see the run's status), and the values at their offsets.
CREATE TABLE streams (
  run_id     TEXT NOT NULL,
  name       TEXT NOT NULL,
  length     INTEGER NOT NULL,
  closed     INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
CREATE TABLE stream_values (
  run_id     TEXT NOT NULL,
  name       TEXT NOT NULL,
  pos        INTEGER NOT NULL,
  value      TEXT NOT NULL,
  written_at INTEGER NOT NULL,
  PRIMARY KEY (run_id, name, pos)
) WITHOUT ROWID;
)sql",
                                                             R"sql(
-- Payloads at rest (RuntimeOptions::encryption_key_file): the data key of each correlation id
-- (a run without one: its run id), wrapped by the key file's key key_id. Runtime::forget
-- deletes a row with secure_delete on.
CREATE TABLE data_keys (
  owner      TEXT PRIMARY KEY,
  key_id     TEXT NOT NULL,
  wrapped    TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
-- The correlation id of the run that sent an event (step.send_event), whose data key encrypts
-- the event's data; NULL for an event sent from outside (its own data key).
ALTER TABLE events ADD COLUMN correlation_id TEXT;
)sql",
                                                             R"sql(
-- Rate limits count a run from its claim until a period after its first step body began
-- (NULL: none yet), not from its first claim. Runs begun before this version count as begun.
ALTER TABLE runs ADD COLUMN first_body_at INTEGER;
UPDATE runs SET first_body_at = began_at WHERE rate_key IS NOT NULL AND began_at IS NOT NULL;
DROP INDEX runs_began;
CREATE INDEX runs_first_body ON runs (workflow, rate_key, first_body_at)
  WHERE rate_key IS NOT NULL;
)sql",
                                                             R"sql(
-- No table changes: steps.kind may now be 'tags' (step.set_tags), which an older build cannot
-- replay; it refuses the file instead.
)sql"};

}  // namespace durable::detail
