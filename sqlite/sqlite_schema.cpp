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
-- The same index, its predicate without an IN list: see kLiveStatus in sql_store.hpp.
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
)sql"};

}  // namespace durable::detail
