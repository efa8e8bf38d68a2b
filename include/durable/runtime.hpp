// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The local runtime: runs workflows against one SQLite file.

#include <chrono>
#include <durable/info.hpp>
#include <durable/options.hpp>
#include <durable/workflow.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace durable {

namespace detail {
class RuntimeCore;
struct RuntimeAccess;
}  // namespace detail

/// Runs workflows and journals their steps in one SQLite database.
///
/// Thread-safe: any method may be called from any thread. Several Runtimes, in one process or
/// many, may open the same database file; a run is executed by one of them at a time (it is
/// claimed with a lease, and a claim of a crashed process on this host is taken over at once).
///
/// A Runtime executes runs only inside serve(), run_until_idle() and wait(); it starts no thread
/// of its own before, so every workflow is add()ed before any run can be claimed.
class Runtime {
 public:
  /// Opens (or creates) the database. Throws Error for a file that is not a durable database
  /// (left untouched), a corrupt file, or one written by a newer durable.
  explicit Runtime(RuntimeOptions opts = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Registers a workflow. Throws Error when the name is empty or already added.
  void add(Workflow wf);

  /// Queues a run of `workflow` and returns its id. Throws UnknownWorkflow for a name not
  /// add()ed, and Error for an input the typed workflow cannot take or whose JSON text is larger
  /// than max_output_bytes; nothing is written then.
  std::string start(std::string_view workflow, json input = json::object(), StartOptions opts = {});

  /// Stores an event and delivers it: each workflow whose WorkflowOptions::events lists the name
  /// gets a run (in whichever process has it added), and each run waiting for the name in
  /// step.wait_for_event whose match fields equal the data's wakes with it. Throws Error for an
  /// empty name or data that cannot be stored; nothing is written then.
  void send_event(std::string_view name, json data = json::object());

  /// The latest value run `run_id` published under `key` (Step::publish). When it has none yet,
  /// waits up to `wait` for the run to publish it, returning as soon as it does, in this process
  /// or another on the same database (docs/messaging.md: how each store wakes the wait); nullopt
  /// if it did not, or at once when the run has ended without it. Throws NotFound for an unknown
  /// run, and Error for a key that is empty, longer than 200 bytes, or holds '/' or a control
  /// character. Holds the calling thread while it waits; any thread may call it.
  std::optional<json> published(std::string_view run_id, std::string_view key,
                                std::chrono::milliseconds wait = {}) const;
  /// Puts a message in one run's mailbox, where it is kept until a step.receive of the run on
  /// this topic takes it (also when sent before the receive began); a receive that waits for
  /// it wakes, in this process or another. Messages on a topic are received in the order sent,
  /// each once. Throws NotFound for an unknown run, Error for a run that has ended, and Error
  /// for a topic that is empty, over 200 bytes, or holds '/' or a control character, or a
  /// message that cannot be stored or is larger than max_output_bytes; nothing is written then.
  void send(std::string_view run_id, std::string_view topic, json message);
  /// The values of run `run_id`'s stream `stream` (Step::write_stream) from offset `from`
  /// (0-based), with the offset to read from next and whether the stream is closed. When none
  /// is there yet and the stream is open, waits up to `wait` for one or for the close, returning
  /// as soon as either comes, from this process or another on the same database. A stream the
  /// run never wrote reads as empty (and closed once the run has ended). Throws NotFound for an
  /// unknown run, and Error for a name that is empty, longer than 200 bytes, or holds '/' or a
  /// control character. Holds the calling thread while it waits; any thread may call it.
  StreamRead read_stream(std::string_view run_id, std::string_view stream, std::size_t from = 0,
                         std::chrono::milliseconds wait = {}) const;

  /// Starts runs of `workflow` with `input` on a schedule, and returns the schedule's id. The
  /// schedule is stored: any runtime on the database that serves (or runs run_until_idle) fires
  /// it, once per due time; after downtime it fires once for all the times it missed. Throws
  /// UnknownWorkflow, and Error for a schedule with neither or both of every and cron, a bad
  /// cron expression, or a count below 1.
  std::string schedule(std::string_view workflow, json input, Schedule when);
  /// Every schedule that has starts left, soonest first.
  std::vector<ScheduleInfo> schedules() const;
  /// Removes a schedule before it fires again; runs it started are not touched. Throws NotFound.
  void unschedule(std::string_view schedule_id);

  /// The run with this id. Throws NotFound.
  RunInfo get(std::string_view run_id) const;
  /// Runs matching the filter, newest first, without their state history (get() has it).
  std::vector<RunInfo> list(const RunFilter& filter = {}) const;
  /// The journal of a run, in the order its entries were first written. Throws NotFound.
  std::vector<StepInfo> steps(std::string_view run_id) const;
  /// The progress last reported (StepContext::heartbeat) by each step of the run that has not
  /// completed: one still running, or retrying. Throws NotFound.
  std::vector<StepProgress> progress(std::string_view run_id) const;

  /// Ends a pending, sleeping, waiting or running run as cancelled: no further step starts, and
  /// the result of a step body already running is not journaled. Also closes a failed run (it
  /// can then no longer be retried; its error stays), so that one that can never succeed stops
  /// counting as failed. `reason` goes into the state history. Throws NotFound; a run already
  /// completed or cancelled is left as it is.
  void cancel(std::string_view run_id, std::string reason = {});
  /// Crypto-shredding for an erasure request: destroys the data key of `correlation_id` (a run
  /// started without one: its run id), deleted so that its bytes do not stay in the database
  /// file (SQLite's secure_delete and a checkpoint; PostgreSQL reuses the space at VACUUM), and
  /// cancels its runs that have not ended, in one transaction. From then on their payloads
  /// (inputs, outputs, step results, error messages, wait matches) read as
  /// {"$forgotten": true}; the runs, their steps and histories (ids, statuses, times) stay.
  /// Throws Error without RuntimeOptions::encryption_key_file. A correlation id with no data
  /// key is no error: there is nothing to destroy.
  void forget(std::string_view correlation_id);
  /// Queues a failed run again: completed steps stay journaled, failed ones run again with a
  /// fresh set of attempts. Throws NotFound, and Error for a run that is not failed.
  void retry(std::string_view run_id);

  /// Bulk actions: every run the filter matches, whatever its limit, in batches. cancel() of
  /// each that has not ended (and closes the failed ones), retry() of each failed one; both
  /// return how many they changed. purge() deletes the runs that have ended, with their
  /// journals, histories and tags, and returns how many; a run that has not ended is never
  /// deleted (nor its child runs, which go on). Throws Error for a filter whose status they
  /// cannot act on (retry of a completed run, purge of running ones).
  std::size_t cancel(const RunFilter& filter, std::string reason = {});
  std::size_t retry(const RunFilter& filter);
  std::size_t purge(const RunFilter& filter);
  /// How many runs the filter matches, whatever its limit: what a bulk action would look at
  /// (its dry run).
  std::size_t count(const RunFilter& filter) const;

  /// Holds a run: a pending, sleeping or waiting run becomes paused at once; a running one once
  /// the steps running now are journaled (RunInfo::pausing meanwhile), and no further step of it
  /// starts. A paused run is claimed by no runtime until resume(); its sleeps, wait timeouts and
  /// deadline keep their times, and an event or child result that comes meanwhile is kept for
  /// it. Throws NotFound, and Error for a run that has ended; a paused run is left as it is.
  void pause(std::string_view run_id);
  /// Lets a paused run go on where it was: a sleep or wait timeout that passed meanwhile wakes it
  /// at once. Throws NotFound, and Error for a run that is not paused (or pausing).
  void resume(std::string_view run_id);
  /// pause() of every run of the workflow that has not ended, and of every run of it started
  /// until resume_workflow(); by any process on the database. Returns how many runs it paused.
  /// Throws Error for an empty name.
  std::size_t pause_workflow(std::string_view workflow);
  /// Ends pause_workflow(): resumes the runs it paused (not those paused one by one with
  /// pause()) and returns how many.
  std::size_t resume_workflow(std::string_view workflow);
  /// The workflows paused with pause_workflow(), by name.
  std::vector<std::string> paused_workflows() const;

  /// Runs an ended run (completed, failed or cancelled) again from a step, after a bug fix: a
  /// new run of the same workflow, input and correlation id, whose journal is a copy of the
  /// original's entries before `from_step` (a journal key, as steps() lists them) that had ended;
  /// steps from there on run again, on the code of the runtime that claims it. Returns its id;
  /// RunInfo::forked_from names the original, which is left as it is. Throws NotFound for an
  /// unknown run or a step its journal does not hold (one the run never reached), and Error for
  /// a run that has not ended; nothing is written then.
  std::string fork(std::string_view run_id, std::string_view from_step);
  /// Completes a failed step by hand: the step (a step.run that failed for good, or is waiting
  /// out a retry backoff in a run no worker holds) is journaled completed with `output`, as if
  /// its body had returned it, and `reason` kept on it (StepInfo::resolved) and in the run's
  /// history; the run is queued again, its other failed steps with fresh attempts (as retry()).
  /// Where this runtime has the workflow add()ed, the run is first replayed with that output
  /// (running no body): an output the step's call cannot take (a result that does not convert
  /// to its type) is refused with InvalidInput. Throws NotFound for an unknown run or step, and
  /// Error for a step or run in another state or an output that cannot be stored; nothing is
  /// written then.
  void resolve(std::string_view run_id, std::string_view step_key, json output,
               std::string reason = {});

  /// The pre-deploy check: replays every unfinished run (pending, running, sleeping, waiting,
  /// paused; with filter.status, the runs of that status) that the filter matches, whatever its
  /// limit, against the workflows add()ed to this runtime, running no step body and writing
  /// nothing, and reports where the code parts from a run's journal: a step id reached as another
  /// kind of step, a call the journal does not hold where it holds a step no call met (an inserted,
  /// renamed or removed step), a run ending or stopping before a journaled step, a run in progress
  /// that the code now fails where nothing journaled failed (an input or result that no longer
  /// converts), a run holding a value that cannot be read. Runs of workflows this runtime did not
  /// add are left out of runs_checked. Each run is read with its journal in a read transaction of
  /// its own, on a read-only connection (the runtime's own, a run at a time, for ":memory:"), so
  /// workers serving the database go on meanwhile. Step bodies do not run, so the steps nested in
  /// them are not checked. Throws Error when the database cannot be read, or was written by a newer
  /// durable.
  VerifyReport verify(const RunFilter& filter = {}) const;

  /// Executes every run that is due now, each until it completes, fails or sleeps, and returns
  /// the number of invocations made.
  std::size_t run_until_idle();
  /// Executes work until the run is completed, failed or cancelled, or the timeout passes;
  /// returns the run as it then is. Throws NotFound.
  RunInfo wait(std::string_view run_id, std::chrono::milliseconds timeout);

  /// The worker loop: executes due runs as they come due (timers for sleeps, backoffs, delayed
  /// starts, event timeouts and schedules), and looks in the database every poll_interval for
  /// work written by other processes. Returns after stop(), SIGINT or SIGTERM: step bodies
  /// already running finish and are journaled, and their runs are handed back for the next
  /// runtime to go on with. Throws Error when this runtime is already serving.
  void serve();
  /// Makes serve() return (from any thread, or before serve() was called: it then returns at
  /// once). Does not wait for it.
  void stop();

  /// What this runtime has done so far.
  Counters counters() const;
  /// Where serve() serves the admin HTTP API and dashboard (RuntimeOptions::http), as
  /// "http://127.0.0.1:PORT"; empty when it does not, or not now.
  std::string http_url() const;

 private:
  friend struct detail::RuntimeAccess;
  std::unique_ptr<detail::RuntimeCore> core_;
};

}  // namespace durable
