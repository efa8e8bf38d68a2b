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
)sql",
                                                                 R"sql(
-- As the SQLite schema's version 16: runs by workflow and status and step.run totals, kept by
-- triggers in the transaction that changes them, and the indexes of newest-first lists. Each
-- session counts into rows of its own (slot: its backend's process id), so that no transaction
-- waits on another's counts; readers sum the slots, and fold_counts() folds those of sessions
-- that ended into slot 0. The lock keeps an older worker's writes out until the triggers that
-- count them are in place; the functions find durable's tables whatever a session's search_path.
LOCK TABLE runs, steps IN SHARE ROW EXCLUSIVE MODE;
CREATE TABLE run_counts (
  workflow TEXT NOT NULL,
  status   TEXT NOT NULL,
  slot     INTEGER NOT NULL,
  runs     BIGINT NOT NULL,
  PRIMARY KEY (workflow, status, slot)
);
INSERT INTO run_counts SELECT workflow, status, 0, count(*) FROM runs GROUP BY workflow, status;
CREATE FUNCTION count_run() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    INSERT INTO run_counts VALUES (OLD.workflow, OLD.status, pg_backend_pid(), -1)
      ON CONFLICT (workflow, status, slot) DO UPDATE SET runs = run_counts.runs - 1;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO run_counts VALUES (NEW.workflow, NEW.status, pg_backend_pid(), 1)
      ON CONFLICT (workflow, status, slot) DO UPDATE SET runs = run_counts.runs + 1;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER runs_counted AFTER INSERT OR DELETE ON runs
  FOR EACH ROW EXECUTE FUNCTION count_run();
CREATE TRIGGER runs_recounted AFTER UPDATE OF workflow, status ON runs
  FOR EACH ROW WHEN (NEW.workflow <> OLD.workflow OR NEW.status <> OLD.status)
  EXECUTE FUNCTION count_run();
-- What each step.run entry adds to its workflow's and step's totals: see the SQLite schema's
-- version 16.
CREATE TABLE step_buckets (upper_ms BIGINT PRIMARY KEY);
INSERT INTO step_buckets VALUES (1), (5), (10), (25), (50), (100), (250), (500), (1000), (2500),
  (5000), (10000), (30000), (60000);
CREATE VIEW step_figures AS
SELECT s.run_id, s.key, r.workflow, s.base AS step,
       CASE WHEN s.duration_ms IS NULL THEN -1
            ELSE (SELECT count(*) FROM step_buckets WHERE upper_ms < s.duration_ms) END AS bucket,
       1 AS entries,
       greatest(s.attempts - CASE WHEN s.state = 'completed' THEN 1 ELSE 0 END, 0)
         AS failed_attempts,
       greatest(s.attempts - CASE WHEN s.state <> 'retrying' THEN 1 ELSE 0 END, 0) AS retries,
       CASE WHEN s.state = 'failed' THEN 1 ELSE 0 END AS failed,
       coalesce(s.duration_ms, 0) AS duration_ms
FROM steps s JOIN runs r ON r.id = s.run_id WHERE s.kind = 'run';
CREATE TABLE step_counts (
  workflow        TEXT NOT NULL,
  step            TEXT NOT NULL,
  bucket          INTEGER NOT NULL,
  slot            INTEGER NOT NULL,
  entries         BIGINT NOT NULL,
  failed_attempts BIGINT NOT NULL,
  retries         BIGINT NOT NULL,
  failed          BIGINT NOT NULL,
  duration_ms     BIGINT NOT NULL,
  PRIMARY KEY (workflow, step, bucket, slot)
);
INSERT INTO step_counts
  SELECT workflow, step, bucket, 0, sum(entries), sum(failed_attempts), sum(retries), sum(failed),
         sum(duration_ms)
  FROM step_figures GROUP BY workflow, step, bucket;
CREATE FUNCTION add_step_figures(entry_run TEXT, entry_key TEXT, sign INTEGER) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
  INSERT INTO step_counts
    SELECT workflow, step, bucket, pg_backend_pid(), sign * entries, sign * failed_attempts,
           sign * retries, sign * failed, sign * duration_ms
    FROM step_figures WHERE run_id = entry_run AND key = entry_key
  ON CONFLICT (workflow, step, bucket, slot) DO UPDATE SET
    entries = step_counts.entries + excluded.entries,
    failed_attempts = step_counts.failed_attempts + excluded.failed_attempts,
    retries = step_counts.retries + excluded.retries, failed = step_counts.failed + excluded.failed,
    duration_ms = step_counts.duration_ms + excluded.duration_ms;
$$;
-- An entry's figures are taken out before it changes and added back after.
CREATE FUNCTION uncount_step() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  PERFORM add_step_figures(OLD.run_id, OLD.key, -1);
  IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
  RETURN NEW;
END $$;
CREATE FUNCTION count_step() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  PERFORM add_step_figures(NEW.run_id, NEW.key, 1);
  RETURN NULL;
END $$;
CREATE TRIGGER steps_uncounted BEFORE DELETE OR UPDATE OF kind, base, state, attempts, duration_ms
  ON steps FOR EACH ROW WHEN (OLD.kind = 'run') EXECUTE FUNCTION uncount_step();
CREATE TRIGGER steps_counted AFTER INSERT OR UPDATE OF kind, base, state, attempts, duration_ms
  ON steps FOR EACH ROW WHEN (NEW.kind = 'run') EXECUTE FUNCTION count_step();
-- One session folds at a time (the others skip): two folds could take the slot-0 rows in
-- different orders and deadlock.
CREATE FUNCTION fold_counts() RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtextextended('durable.fold_counts', 0)) THEN
    RETURN;
  END IF;
  WITH gone AS (
    DELETE FROM run_counts
    WHERE slot <> 0 AND slot NOT IN (SELECT pid FROM pg_stat_activity)
    RETURNING workflow, status, runs)
  INSERT INTO run_counts
    SELECT workflow, status, 0, sum(runs) FROM gone GROUP BY workflow, status
  ON CONFLICT (workflow, status, slot) DO UPDATE SET runs = run_counts.runs + excluded.runs;
  WITH gone AS (
    DELETE FROM step_counts
    WHERE slot <> 0 AND slot NOT IN (SELECT pid FROM pg_stat_activity)
    RETURNING workflow, step, bucket, entries, failed_attempts, retries, failed, duration_ms)
  INSERT INTO step_counts
    SELECT workflow, step, bucket, 0, sum(entries), sum(failed_attempts), sum(retries),
           sum(failed), sum(duration_ms)
    FROM gone GROUP BY workflow, step, bucket
  ON CONFLICT (workflow, step, bucket, slot) DO UPDATE SET
    entries = step_counts.entries + excluded.entries,
    failed_attempts = step_counts.failed_attempts + excluded.failed_attempts,
    retries = step_counts.retries + excluded.retries, failed = step_counts.failed + excluded.failed,
    duration_ms = step_counts.duration_ms + excluded.duration_ms;
END $$;
-- Newest-first lists, each answered from an index in order (runs_newest has every run).
DROP INDEX runs_due;
DROP INDEX runs_workflow;
DROP INDEX runs_correlation;
CREATE INDEX runs_status ON runs (status, created_at, seq);
CREATE INDEX runs_workflow ON runs (workflow, created_at, seq);
CREATE INDEX runs_workflow_status ON runs (workflow, status, created_at, seq);
CREATE INDEX runs_correlation ON runs (correlation_id, created_at, seq);
)sql",
                                                                 R"sql(
-- The values runs publish (Step::publish): the latest per key, its version counting the writes.
CREATE TABLE published (
  run_id     TEXT NOT NULL,
  key        TEXT NOT NULL,
  value      TEXT NOT NULL,
  version    BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (run_id, key)
);
-- A mailbox per run (Runtime::send, step.receive): each message kept until a receive of its run
-- takes it, in the order sent (seq); received_by is the key of the receive's journal entry.
CREATE TABLE messages (
  seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  run_id      TEXT NOT NULL,
  topic       TEXT NOT NULL,
  data        TEXT NOT NULL,
  sent_at     BIGINT NOT NULL,
  received_by TEXT
);
CREATE INDEX messages_run ON messages (run_id, topic, seq);
-- Runs' streams (Step::write_stream): each one's length and whether the run closed it (a run's
-- end closes them too: readers see the run's status), and the values at their offsets.
CREATE TABLE streams (
  run_id     TEXT NOT NULL,
  name       TEXT NOT NULL,
  length     BIGINT NOT NULL,
  closed     BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (run_id, name)
);
CREATE TABLE stream_values (
  run_id     TEXT NOT NULL,
  name       TEXT NOT NULL,
  pos        BIGINT NOT NULL,
  value      TEXT NOT NULL,
  written_at BIGINT NOT NULL,
  PRIMARY KEY (run_id, name, pos)
);
-- A run that ends with a stream open wakes the stream's readers in other processes: its end
-- closes the stream. Only such runs notify: a NOTIFY serializes the commits that send one.
CREATE FUNCTION announce_stream_ends() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM streams WHERE run_id = NEW.id AND closed = 0) THEN
    PERFORM pg_notify('durable_change', NEW.id || '/');
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER runs_ended_streams AFTER UPDATE OF status ON runs FOR EACH ROW
  WHEN (NEW.status IN ('completed', 'failed', 'cancelled') AND
        OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION announce_stream_ends();
)sql",
                                                                 R"sql(
-- Payloads at rest: the data key of each correlation id (or run id), wrapped by key_id.
CREATE TABLE data_keys (
  owner      TEXT PRIMARY KEY,
  key_id     TEXT NOT NULL,
  wrapped    TEXT NOT NULL,
  created_at BIGINT NOT NULL
);
-- The correlation id of the run that sent an event, whose data key encrypts its data.
ALTER TABLE events ADD COLUMN correlation_id TEXT;
)sql",
                                                                 R"sql(
-- Rate limits count a run from its claim until a period after its first step body began.
ALTER TABLE runs ADD COLUMN first_body_at BIGINT;
UPDATE runs SET first_body_at = began_at WHERE rate_key IS NOT NULL AND began_at IS NOT NULL;
DROP INDEX runs_began;
CREATE INDEX runs_first_body ON runs (workflow, rate_key, first_body_at)
  WHERE rate_key IS NOT NULL;
)sql",
                                                                 R"sql(
-- No table changes: steps.kind may now be 'tags' (step.set_tags), which an older build cannot
-- replay; it refuses the database instead.
)sql"};

}  // namespace durable::detail::pg
