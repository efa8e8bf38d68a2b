// SPDX-License-Identifier: Apache-2.0
// The PostgreSQL store's schema, as the migrations that build it: the same tables and columns as
// SQLite's (docs/journal-format.md), with BIGINT times and sequences where SQLite has rowids. A
// new version appends a migration; none is ever edited. Its versions count on their own: the
// SQLite schema's history (six versions) is not PostgreSQL's.

#include "pg_schema.hpp"

namespace durable::detail::pg {

const std::array<const char*, kPgSchemaVersion> kPgMigrations = {R"sql(
CREATE TABLE runs (
  seq             BIGINT GENERATED ALWAYS AS IDENTITY,
  id              TEXT PRIMARY KEY,
  workflow        TEXT NOT NULL,
  correlation_id  TEXT NOT NULL,
  idempotency_key TEXT,
  status          TEXT NOT NULL,
  input           TEXT NOT NULL,
  output          TEXT,
  error           TEXT,
  invocations     INTEGER NOT NULL DEFAULT 0,
  due_at          BIGINT,
  owner           TEXT,
  created_at      BIGINT NOT NULL,
  updated_at      BIGINT NOT NULL,
  parent_id       TEXT,
  parent_step     TEXT,
  crashes         INTEGER NOT NULL DEFAULT 0,
  UNIQUE (workflow, idempotency_key)
);
CREATE INDEX runs_due ON runs (status, due_at);
CREATE INDEX runs_workflow ON runs (workflow, status);
CREATE INDEX runs_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX runs_claimable ON runs (due_at)
  WHERE status IN ('pending', 'sleeping', 'waiting', 'running');
CREATE INDEX runs_correlation ON runs (correlation_id);
CREATE INDEX runs_newest ON runs (created_at DESC, seq DESC);
CREATE TABLE steps (
  run_id      TEXT NOT NULL,
  key         TEXT NOT NULL,
  seq         BIGINT NOT NULL,
  base        TEXT NOT NULL,
  kind        TEXT NOT NULL,
  state       TEXT NOT NULL,
  output      TEXT,
  error       TEXT,
  attempts    INTEGER NOT NULL DEFAULT 0,
  wake_at     BIGINT,
  invocation  INTEGER NOT NULL DEFAULT 0,
  updated_at  BIGINT NOT NULL,
  duration_ms BIGINT,
  started_at  BIGINT,
  PRIMARY KEY (run_id, key)
);
CREATE TABLE history (
  id     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  run_id TEXT NOT NULL,
  at     BIGINT NOT NULL,
  status TEXT NOT NULL,
  reason TEXT NOT NULL
);
CREATE INDEX history_run ON history (run_id, id);
CREATE TABLE workers (
  id          TEXT PRIMARY KEY,
  host        TEXT NOT NULL,
  pid         BIGINT NOT NULL,
  start_ticks BIGINT NOT NULL,
  started_at  BIGINT NOT NULL,
  seen_at     BIGINT,
  lease_ms    BIGINT
);
CREATE TABLE events (
  seq  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id   TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  data TEXT NOT NULL,
  at   BIGINT NOT NULL
);
CREATE INDEX events_name ON events (name, seq);
CREATE TABLE waits (
  run_id TEXT NOT NULL,
  key    TEXT NOT NULL,
  event  TEXT NOT NULL,
  match  TEXT NOT NULL,
  since  BIGINT NOT NULL,
  PRIMARY KEY (run_id, key)
);
CREATE INDEX waits_event ON waits (event);
CREATE TABLE triggers (
  event    TEXT NOT NULL,
  workflow TEXT NOT NULL,
  PRIMARY KEY (event, workflow)
);
CREATE TABLE schedules (
  id         TEXT PRIMARY KEY,
  workflow   TEXT NOT NULL,
  input      TEXT NOT NULL,
  every_ms   BIGINT NOT NULL,
  cron       TEXT NOT NULL,
  remaining  INTEGER,
  next_at    BIGINT NOT NULL,
  fired      INTEGER NOT NULL DEFAULT 0,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  spec       TEXT NOT NULL
);
CREATE INDEX schedules_due ON schedules (next_at);
CREATE TABLE workflows (
  name    TEXT PRIMARY KEY,
  seen_at BIGINT NOT NULL
);
)sql",
                                                                 R"sql(
-- No table changes: steps.kind may now be 'value' (step.now, step.uuid, step.random) or 'patch'
-- (step.patched's marker), which an older build cannot replay; it refuses the schema instead.
)sql",
                                                                 R"sql(
-- As the SQLite schema's version 9: run versions, forks, continue_as_new, resolved steps.
ALTER TABLE runs ADD COLUMN version TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN forked_from TEXT;
ALTER TABLE runs ADD COLUMN continued_as TEXT;
ALTER TABLE steps ADD COLUMN resolved TEXT;
)sql",
                                                                 R"sql(
-- As the SQLite schema's version 10: priorities, deadlines, tags, paused runs and workflows.
ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN deadline_at BIGINT;
ALTER TABLE runs ADD COLUMN tags TEXT;
ALTER TABLE runs ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN paused_from TEXT;
CREATE INDEX runs_prioritized ON runs (priority DESC, due_at)
  WHERE priority != 0 AND status IN ('pending', 'sleeping', 'waiting', 'running');
CREATE INDEX runs_deadline ON runs (deadline_at)
  WHERE deadline_at IS NOT NULL AND
        status IN ('pending', 'sleeping', 'waiting', 'running', 'paused');
CREATE INDEX runs_paused ON runs (workflow) WHERE status = 'paused';
CREATE TABLE run_tags (
  run_id TEXT NOT NULL,
  key    TEXT NOT NULL,
  value  TEXT NOT NULL,
  PRIMARY KEY (run_id, key)
);
CREATE INDEX run_tags_value ON run_tags (key, value);
CREATE TABLE paused_workflows (
  name TEXT PRIMARY KEY,
  at   BIGINT NOT NULL
);
)sql",
                                                                 R"sql(
-- As the SQLite schema's version 11: flow-control keys and first claims.
ALTER TABLE runs ADD COLUMN flow_key TEXT;
ALTER TABLE runs ADD COLUMN rate_key TEXT;
ALTER TABLE runs ADD COLUMN began_at BIGINT;
ALTER TABLE workflows ADD COLUMN flow TEXT;
CREATE INDEX runs_running_keys ON runs (workflow, flow_key) WHERE status = 'running';
CREATE INDEX runs_began ON runs (workflow, rate_key, began_at) WHERE rate_key IS NOT NULL;
)sql",
                                                                 R"sql(
-- As the SQLite schema's version 12: debounce keys, and the ended runs for retention.
ALTER TABLE runs ADD COLUMN debounce_key TEXT;
CREATE INDEX runs_debounce ON runs (workflow, debounce_key)
  WHERE status = 'pending' AND debounce_key IS NOT NULL;
CREATE INDEX runs_ended ON runs (updated_at)
  WHERE status IN ('completed', 'failed', 'cancelled');
)sql",
                                                                 R"sql(
-- As the SQLite schema's version 13: the progress a step's body last reported.
CREATE TABLE step_progress (
  run_id   TEXT NOT NULL,
  step_key TEXT NOT NULL,
  attempt  INTEGER NOT NULL,
  progress TEXT NOT NULL,
  at       BIGINT NOT NULL,
  PRIMARY KEY (run_id, step_key)
);
)sql",
                                                                 R"sql(
-- As the SQLite schema's version 14: the trace context a run joins.
ALTER TABLE runs ADD COLUMN traceparent TEXT;
)sql",
                                                                 R"sql(
-- As the SQLite schema's version 15: each worker's counters, written by its heartbeat.
ALTER TABLE workers ADD COLUMN counters TEXT;
)sql"};

}  // namespace durable::detail::pg
