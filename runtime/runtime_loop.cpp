// SPDX-License-Identifier: Apache-2.0
// The worker loop: which runs this runtime takes and when, how it executes them, and how their
// writes reach the store.
//
// One thread (serve()'s, or the caller's of run_until_idle() and wait()) runs each claimed run's
// workflow code on a fiber of its own; the step bodies run on the step threads. Whenever no fiber
// can go on and a step thread is free, the loop claims the runs due next, oldest first, so a run
// that comes due while others' bodies execute starts at once. A run that held its claim for a
// fair slice gives its turn up at its next step boundary when another run is due, so a queue of
// slow runs cannot starve the runs due after them.

#include <algorithm>
#include <functional>
#include <set>
#include <utility>

#include "run_requests.hpp"
#include "runtime_core.hpp"

namespace durable::detail {

namespace {
// Whether the write ends its run (its streams close with it).
bool ends_run(const RunWrite& write) { return write.status && ended(*write.status); }
}  // namespace

std::size_t RuntimeCore::run_until_idle() { return run_due(std::nullopt, kClaimBatch); }

// Claims due runs for one run_due() and spawns a fiber for each.
class RuntimeCore::Admission {
 public:
  Admission(RuntimeCore& core, FiberScheduler& scheduler,
            std::optional<std::chrono::steady_clock::time_point> deadline, std::size_t batch)
      : core_(&core), scheduler_(&scheduler), deadline_(deadline), batch_(batch) {
    std::lock_guard lock(core.workflows_mutex_);
    for (const auto& [name, wf] : core.workflows_) {
      names_.push_back(name);
      if (const FlowRule rule = flow_rule(wf->options());
          rule.concurrency > 0 || rule.rate_limit > 0) {
        flows_[name] = rule;
      }
    }
  }

  ~Admission() {
    // Runs still claimed when an exception ended the loop: their leases lapse, and any runtime
    // (this one too) takes them over then.
    std::lock_guard lock(core_->store_mutex_);
    for (const std::string& id : claimed_) core_->executing_.erase(id);
  }

  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // The scheduler's idle hook: claims what is due when a step thread is free; whether it
  // spawned a fiber.
  bool admit() {
    try {
      return admit_due();
    } catch (...) {
      // The fibers alive finish their invocations first; run_due() rethrows after them.
      failed_ = true;
      if (!error_) error_ = std::current_exception();
      return false;
    }
  }

  // A start, event, cancel or stop in this process: look at the store at the next idle moment.
  void look_now() { look_now_ = true; }  // from any thread
  std::size_t invocations() const { return invocations_; }
  std::exception_ptr error() const { return error_; }

 private:
  bool admit_due() {
    if (failed_ || alone_ || core_->stopping() || core_->halted_) return false;
    const auto now = core_->env().steady_now();
    if (deadline_ && now >= *deadline_) return false;
    const std::size_t alive = scheduler_->working();
    // A body's end or a commit brings the loop back. (wait() holds one run at a time.)
    if (alive >= std::min(batch_, kClaimBatch)) return false;
    const std::size_t free = core_->step_pool().free_threads();
    if (alive > 0 && free == 0) return false;  // likewise: claimed now, a run would wait
    // Taken before the claim, so that a wake-up during it is not lost. With no run alive the
    // loop always claims once more before it ends: what a step body's Client, or another
    // process, started meanwhile is run in the same pass.
    if (!look_now_.exchange(false) && alive > 0 && now < next_look_) {
      scheduler_->recheck_at(next_look_);
      return false;
    }
    core_->schedules_.fire();  // also while a steady stream of work keeps this loop busy
    core_->expire_deadlines();
    if (core_->serving_) core_->backlog_.check();
    // Quick bodies: a whole batch at once, whose commits go together. Slow ones: a run per free
    // thread, so that no claimed run waits for a thread while the runs due after it wait too.
    std::size_t limit = std::min(batch_, kClaimBatch - alive);
    if (!core_->bodies_quick()) limit = std::min(limit, std::max<std::size_t>(free, 1));
    Claimed claimed;
    for (;;) {
      claimed = claim(limit);
      for (const std::string& id : claimed.quarantined) core_->telemetry_->report_quarantined(id);
      if (!claimed.runs.empty() || claimed.quarantined.empty()) break;
    }
    // A claim that took fewer than it could: nothing else is due before the next due time,
    // unless a start or event in this process (a poke) or another process says otherwise.
    if (claimed.runs.size() == limit) {
      look_now_ = true;
    } else {
      plan_next_look(claimed);
    }
    for (Claim& claim : claimed.runs) spawn(std::move(claim));
    return !claimed.runs.empty();
  }

  // A write of its own: the claim reads and moves executing_ under the store's lock, which the
  // writer holds while it runs it.
  Claimed claim(std::size_t limit) {
    return core_->writer_.alone([&](ClaimStore& store) { return claim_in(store, limit); });
  }

  Claimed claim_in(ClaimStore& store, std::size_t limit) {
    ClaimRequest request;
    request.owner = core_->worker_.id;
    request.workflows = names_;
    request.now_ms = core_->now_ms();
    request.lease_ms = core_->options_.lease.count();
    request.limit = limit;
    request.dead_owners = core_->dead_owners();
    request.executing.assign(core_->executing_.begin(), core_->executing_.end());
    request.flows = flows_;
    request.quarantine_after = core_->options_.quarantine_after;
    // A run this runtime cannot decode rolls the claim back; it is claimed again without it.
    // Each pass sets one more aside; past a batch of them, this look claims nothing.
    Claimed claimed;
    for (std::size_t pass = 0; pass <= kClaimBatch; ++pass) {
      request.set_aside = core_->set_aside();
      try {
        claimed = store.claim(request);
        break;
      } catch (const UndecodableRun& run) {
        core_->set_aside(run);
      }
    }
    for (const Claim& c : claimed.runs) {
      core_->executing_.insert(c.run.id);
      claimed_.insert(c.run.id);
    }
    return claimed;
  }

  // When to look at the store again while fibers run: at the next due time (which the claim
  // read, unless it took as many as it could), or after poll_interval for what other processes
  // write.
  void plan_next_look(const Claimed& claimed) {
    const auto now = core_->env().steady_now();
    auto wait = core_->options_.poll_interval;
    std::optional<std::int64_t> due = claimed.next_due;
    std::optional<std::int64_t> fire, deadline;
    {
      std::lock_guard lock(core_->store_mutex_);
      if (!claimed.next_due_read) {
        due = core_->store_->next_due(names_, {core_->executing_.begin(), core_->executing_.end()});
      }
      // Read by Schedules::fire() and expire_deadlines() just before: no read, mostly.
      fire = core_->schedules_.next_fire(*core_->store_);
      deadline = core_->next_deadline();
    }
    const std::int64_t now_ms = core_->now_ms();
    const std::int64_t earliest =
        std::min({due.value_or(kNever), fire.value_or(kNever), deadline.value_or(kNever)});
    if (earliest > now_ms) {
      wait = std::min(
          wait, std::chrono::milliseconds(std::max<std::int64_t>(kMinPause, earliest - now_ms)));
    }
    // A run due now that this claim left (its workflow at its limit, a run to be claimed alone,
    // one another process took meanwhile) is looked at again after poll_interval, not in a
    // spin, and the runs held do not give their turns up for it.
    core_->unclaimable_due_ms_ = due && *due <= now_ms ? *due : -1;
    next_look_ = now + wait;
    if (deadline_) next_look_ = std::min(next_look_, *deadline_);
    scheduler_->recheck_at(next_look_);
  }

  void spawn(Claim claim) {
    alone_ = alone_ || claim.alone;  // nothing more is claimed beside it until it ends
    auto held = std::make_shared<Claim>(std::move(claim));
    scheduler_->spawn([this, held] {
      const std::string id = held->run.id;
      const bool alone = held->alone;
      // Once: when drive() returns, or before, when an invocation lets the run go while a body
      // abandoned at its timeout still runs (the run may be claimed again meanwhile).
      bool let_go = false;
      const std::function<void()> release = [&] {
        if (std::exchange(let_go, true)) return;
        if (alone) alone_ = false;
        std::lock_guard lock(core_->store_mutex_);
        core_->executing_.erase(id);
        if (const auto it = claimed_.find(id); it != claimed_.end()) claimed_.erase(it);
      };
      try {
        invocations_ += core_->drive(std::move(*held), release);
      } catch (...) {
        failed_ = true;  // the loop admits no more; the error leaves run_due() once all end
        throw;
      }
      release();
    });
  }

  RuntimeCore* core_;
  FiberScheduler* scheduler_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::size_t batch_;
  std::vector<std::string> names_;
  std::map<std::string, FlowRule> flows_;
  // By this loop and not let go yet (store_mutex_); a run let go early may be claimed again
  // before its first claim's fiber ends.
  std::multiset<std::string> claimed_;
  std::size_t invocations_ = 0;
  bool failed_ = false;
  std::exception_ptr error_;  // out of a claim
  bool alone_ = false;        // a run claimed alone (Claim::alone) is alive
  std::atomic<bool> look_now_{true};
  std::chrono::steady_clock::time_point next_look_{};
};

std::size_t RuntimeCore::run_due(std::optional<std::chrono::steady_clock::time_point> deadline,
                                 std::size_t batch) {
  heartbeat_.start();
  {
    std::lock_guard lock(store_mutex_);
    schedules_
        .forget_next_fire();  // each pass sees the schedules other processes wrote since the last
  }
  FiberScheduler scheduler(step_pool());
  Admission admission(*this, scheduler, deadline, batch);
  CommitGroup group(*this, scheduler);
  scheduler.set_idle_hook([&] { return group.flush() || admission.admit(); });
  // A start or event in this process wakes the loop (notify_waiters) to look at the store.
  const Loop loop{&scheduler, &admission};
  {
    std::lock_guard lock(loops_mutex_);
    loops_.push_back(loop);
  }
  struct Forget {
    RuntimeCore* core;
    Loop loop;
    ~Forget() {
      std::lock_guard lock(core->loops_mutex_);
      std::erase(core->loops_, loop);
    }
  } forget{this, loop};
  scheduler.run();
  if (admission.error()) std::rethrow_exception(admission.error());
  return admission.invocations();
}

void RuntimeCore::wake_loops() {
  std::lock_guard lock(loops_mutex_);
  for (const Loop& loop : loops_) {
    loop.admission->look_now();
    loop.scheduler->poke();
  }
}

void RuntimeCore::note_body(std::chrono::steady_clock::duration took) {
  if (took <= kQuickBody) {
    if (quick_bodies_.load(std::memory_order_relaxed) < kQuickStreak) ++quick_bodies_;
  } else {
    quick_bodies_ = 0;
  }
  step_pool().set_quick(bodies_quick());
}

bool RuntimeCore::should_yield(Turn& turn) {
  const auto now_time = env_->steady_now();
  if (now_time < turn.next_look) return false;
  turn.next_look = now_time + kYieldLook;
  // The free step threads, this run's own among them: it gives its turn up when the runs due
  // (before it, since it is due now) would take them all.
  const std::size_t free = std::max<std::size_t>(step_pool().free_threads(), 1);
  const std::vector<std::string> names = workflow_names();
  std::lock_guard lock(store_mutex_);
  const std::int64_t now = now_ms();
  std::size_t due = store_->due_count(names, {executing_.begin(), executing_.end()}, now, free + 1);
  const std::int64_t left = unclaimable_due_ms_.load();
  if (left >= 0 && left <= now && due > 0) --due;  // one the last claim could not take
  return due >= free;
}

// A run this runtime holds goes back to pending when serve() is stopping, so that the next
// runtime goes on with it at once instead of after the lease; or when it yields its turn, to
// be claimed again after the runs due before it.
void RuntimeCore::hand_back(const RunState& run, bool yielding) {
  if (!yielding && !stopping()) return;
  const std::string reason = yielding ? "" : "handed back: its runtime was stopped";
  const bool released = writer_.alone(
      [&](ClaimStore& store) { return store.release(run.id, worker_.id, now_ms(), reason); });
  if (released && !yielding) {
    logger_.write(LogLevel::info, "run.handed_back", "handed back at a step boundary on stop",
                  Telemetry::run_fields(run), now_ms());
  }
}

// A claimed run with a stored value too deep to read safely (written before the depth limit, or
// by another tool) is failed at once: executing it would crash this process.
std::size_t RuntimeCore::fail_unreadable(const Claim& claim) {
  RunWrite write;
  write.run_id = claim.run.id;
  write.owner = worker_.id;
  write.first_seq = claim.run.next_seq;
  write.invocations = claim.run.invocations;
  write.now_ms = now_ms();
  write.status = Status::failed;
  write.reason = "run " + claim.run.id + ": " + *claim.unreadable;
  write.error = ErrorInfo{"durable::Error", with_id(errc::database, write.reason), {}, 0};
  write.clear_crashes = claim.crashes > 0;
  if (commit(write) != Written::refused) telemetry_->record(claim.run, nullptr, &write);
  return 0;
}

void RuntimeCore::set_aside(const UndecodableRun& run) {
  set_aside_[run.run_id] = env_->steady_now() + kSetAside;
  logger_.write(LogLevel::error, "run.undecodable",
                std::string("left to other workers for a minute: this runtime cannot read it (") +
                    run.what() + ")",
                {{"run_id", run.run_id}}, now_ms());
}

std::vector<std::string> RuntimeCore::set_aside() {
  const auto now = env_->steady_now();
  std::vector<std::string> ids;
  for (auto it = set_aside_.begin(); it != set_aside_.end();) {
    if (it->second <= now) {
      it = set_aside_.erase(it);
    } else {
      ids.push_back(it->first);
      ++it;
    }
  }
  return ids;
}

std::size_t RuntimeCore::drive(Claim claim, const std::function<void()>& let_go) {
  Turn turn(env_->steady_now());
  std::shared_ptr<const Workflow> wf = find_workflow(claim.run.workflow);
  RunState& run = claim.run;
  std::uint64_t seed = 0;
  {
    std::lock_guard lock(store_mutex_);
    seed = random_();
  }
  std::mt19937_64 random(seed);  // for retry jitter; seeding costs a microsecond, so once a claim
  if (claim.unreadable) return fail_unreadable(claim);
  RunHost host(*this, claim, turn, let_go);
  for (std::size_t made = 1;; ++made) {
    if (stopping()) {  // a run claimed before serve() was asked to stop, not begun yet
      hand_back(run);
      return made - 1;
    }
    if (halted_) return made - 1;
    Outcome outcome = Invocation(run, *wf, engine_config_, now_ms(), random, host).execute();
    if (host.handed_over()) return made;  // written and let go already
    if (!conclude(claim, outcome, host.yielded())) return made;
    adopt(run, outcome.entries);
    if (should_yield(turn)) {
      hand_back(run, true);
      return made;
    }
  }
}

bool RuntimeCore::conclude(Claim& claim, Outcome& outcome, bool yielded) {
  RunState& run = claim.run;
  ++run.invocations;
  if (outcome.kind == Outcome::Kind::lost) {
    hand_back(run, yielded);
    return false;
  }
  RunWrite write = write_for(run, outcome, claim.lease_until_ms);
  write.clear_crashes = claim.crashes > 0;
  // Steps whose entries the step threads wrote as they ended, and nothing else: no write.
  // (Unless a pause is asked for: then a write at this boundary makes it.)
  const bool nothing_new = outcome.kind == Outcome::Kind::step_done && outcome.entries.empty() &&
                           !write.renew_lease && !write.clear_crashes && !run.pausing;
  if (!nothing_new) {
    const Written written = commit(write);
    run.next_seq += write.new_entries();
    // Not written: the run was cancelled or taken over meanwhile; its result is not used.
    if (written == Written::refused) return false;
    if (written == Written::yes) run.pausing = false;  // resumed meanwhile: nothing to make
    claim.crashes = 0;
    telemetry_->record(run, &outcome.entries, &write);
    if (written == Written::paused) {
      logger_.write(LogLevel::info, "run.paused", "paused at a step boundary, as asked",
                    Telemetry::run_fields(run), write.now_ms);
      return false;
    }
  }
  return outcome.kind == Outcome::Kind::step_done;
}

namespace {
thread_local RuntimeCore::CommitGroup* t_group = nullptr;
}

RuntimeCore::CommitGroup::CommitGroup(RuntimeCore& core, FiberScheduler& scheduler)
    : core_(&core), scheduler_(&scheduler), outer_(t_group) {
  t_group = this;
}

RuntimeCore::CommitGroup::~CommitGroup() { t_group = outer_; }

RuntimeCore::CommitGroup* RuntimeCore::CommitGroup::current() { return t_group; }

// Group commit: the runs on this thread's fibers that reached a commit wait (their fibers
// parked) until no run can go on without one; then all their writes go in one transaction,
// with the entries of the bodies that ended on the step threads since the last one. Returns
// whether it made a task ready (the idle hook's contract), not whether it wrote.
bool RuntimeCore::CommitGroup::flush() {
  std::vector<Queued> queued;
  {
    std::lock_guard lock(queue_mutex_);
    queued.swap(queued_);
  }
  if (waiting_.empty() && queued.empty()) return false;
  Writer::Request request;
  for (const Waiter* w : waiting_) request.writes.push_back(w->write);
  for (Queued& q : queued) request.entries.push_back(&q.write);
  std::exception_ptr error;
  try {
    core_->writer_.write(request);
  } catch (...) {
    error = std::current_exception();
  }
  std::vector<Written>& written = request.written;
  written.resize(waiting_.size() + queued.size(), Written::refused);
  for (std::size_t i = 0; i < waiting_.size(); ++i) {
    Waiter& w = *waiting_[i];
    w.written = written[i];
    w.error = error;
    if (w.written != Written::refused) {
      try {
        core_->committed(w.write->run_id, w.write->entries, ends_run(*w.write));
      } catch (...) {
        w.error = std::current_exception();
      }
    }
    scheduler_->make_ready(w.task);
  }
  report(queued, written, waiting_.size(), error);
  // Whether a task was made ready: only then does the scheduler run tasks instead of going on to
  // admit runs and to look at the woken and sleeping ones.
  bool readied = !waiting_.empty();
  waiting_.clear();
  std::erase_if(queue_waiters_, [&](const QueueWaiter& w) {
    if (w.left->load() != 0) return false;
    scheduler_->make_ready(w.task);
    readied = true;
    return true;
  });
  return readied;
}

// Tells each queued entry's body how its write came out (written[from + i]), and counts and
// logs those written.
void RuntimeCore::CommitGroup::report(std::vector<Queued>& queued,
                                      const std::vector<Written>& written, std::size_t from,
                                      std::exception_ptr error) {
  for (std::size_t i = 0; i < queued.size(); ++i) {
    Queued& q = queued[i];
    const bool ok = !error && written[from + i] != Written::refused;
    q.done(ok, ok ? core_->wrote(q.write) : error);
    --*q.left;
  }
}

void RuntimeCore::CommitGroup::queue(RunState& run, const EntryWrite& entry, WriteDone done,
                                     std::atomic<std::size_t>& left) {
  {
    std::lock_guard lock(queue_mutex_);
    queued_.push_back(Queued{{&run, {entry}, {}}, std::move(done), &left});
    ++left;  // once queued: a throw above leaves nothing for wait_queued to wait for
  }
  scheduler_->poke();
}

void RuntimeCore::CommitGroup::wait_queued(const std::atomic<std::size_t>& left) {
  if (left.load() == 0) return;
  queue_waiters_.push_back({&left, scheduler_->running()});
  scheduler_->park();
}

Written RuntimeCore::CommitGroup::wait(const RunWrite& write) {
  Waiter waiter{&write, scheduler_->running(), Written::refused, nullptr};
  waiting_.push_back(&waiter);
  scheduler_->park();
  if (waiter.error) std::rethrow_exception(waiter.error);
  return waiter.written;
}

// A run's write: with other runs in flight on this thread's fibers, in their group's next
// transaction; alone, at once.
Written RuntimeCore::commit(const RunWrite& write) {
  if (halted_) return Written::refused;
  FiberScheduler* scheduler = FiberScheduler::current();
  if (t_group != nullptr && scheduler != nullptr && scheduler->running() != nullptr &&
      scheduler->working() > 1) {
    return t_group->wait(write);
  }
  Writer::Request request;
  request.writes = {&write};
  writer_.write(request);
  const Written written = request.written.front();
  if (written != Written::refused) committed(write.run_id, write.entries, ends_run(write));
  return written;
}

bool RuntimeCore::write_entry(RunState& run, const EntryWrite& entry) {
  EntriesWrite write{&run, {entry}, {}};
  Writer::Request request;
  request.entries = {&write};
  writer_.write(request);
  if (request.written.front() == Written::refused) return false;
  if (std::exception_ptr error = wrote(write)) std::rethrow_exception(error);
  return true;
}

void RuntimeCore::adopt(RunState& run, std::vector<EntryWrite>& entries) {
  for (EntryWrite& w : entries) run.journal.record(std::move(w.entry), w.is_new);
  entries.clear();
}

std::exception_ptr RuntimeCore::wrote(EntriesWrite& w) {
  try {
    // A transaction step's entry is what its body made of it in the store.
    for (EntryWrite& e : w.entries) {
      if (e.transaction && e.transaction->written) {
        e = EntryWrite{*e.transaction->written, e.is_new};
      }
    }
    telemetry_->record(*w.run, &w.entries, nullptr);
    committed(w.run->id, &w.entries);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

}  // namespace durable::detail
