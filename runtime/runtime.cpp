// SPDX-License-Identifier: Apache-2.0
#include <unistd.h>

#include <csignal>
#include <durable/runtime.hpp>
#include <fstream>
#include <sstream>
#include <utility>

#include "durations.hpp"
#include "errors_internal.hpp"
#include "published.hpp"
#include "replay_check.hpp"
#include "retry.hpp"
#include "run_requests.hpp"
#include "runtime_core.hpp"
#include "serialization.hpp"
#include "trace_context.hpp"
#include "worker_counters.hpp"

namespace durable::detail {

namespace {

// The start time of a process in clock ticks since boot (field 22 of /proc/PID/stat), which
// tells a live process from a new one that reused a dead one's pid. 0 when unknown.
std::int64_t process_start_ticks(std::int64_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) return std::stoll(field);
  }
  return 0;
}

// Where a pid means one process: the host name, the boot (a reboot reuses pids) and the pid
// namespace (containers on one host may share a host name and a database volume).
std::string host_identity() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char ns[128] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  // Stored as text: a host name that is not UTF-8 is kept readable, not refused.
  return utf8_or_replaced(std::string(name) + " boot:" + boot + " " +
                          (n > 0 ? std::string(ns, n) : "pid:?"));
}

bool process_alive(const Worker& worker) {
  if (::kill(static_cast<pid_t>(worker.pid), 0) != 0 && errno == ESRCH) return false;
  const std::int64_t ticks = process_start_ticks(worker.pid);
  return ticks == 0 || ticks == worker.start_ticks;
}

}  // namespace

RuntimeCore::RuntimeCore(RuntimeOptions opts)
    : options_(std::move(opts)),
      env_(std::shared_ptr<Env>(), &Env::system()),  // the process's own: not owned
      logger_(options_.log_level, options_.log_sink) {
  if (options_.lease.count() <= 0)
    throw Error(errc::config, "RuntimeOptions::lease must be positive");
  if (options_.quarantine_after < 0 || options_.quarantine_after == 1) {
    // One crashed claim says nothing of which run of the batch crashed: quarantining after it
    // would fail every run a worker held when it was killed.
    throw Error(errc::config,
                "RuntimeOptions::quarantine_after must be 0 (never) or 2 or more, not " +
                    std::to_string(options_.quarantine_after));
  }
  if (options_.poll_interval.count() <= 0)
    throw Error(errc::config, "RuntimeOptions::poll_interval must be positive");
  engine_config_.max_output_bytes = options_.max_output_bytes;
  engine_config_.resident = options_.replay == Replay::on_recovery;
  engine_config_.resident_sleep_ms = options_.resident_sleep.count();
  engine_config_.write_as_ended = true;
  engine_config_.strict = options_.strict_replay;
  if (options_.only_own_version && options_.version.empty()) {
    throw Error(errc::config,
                "RuntimeOptions::only_own_version needs a RuntimeOptions::version to claim by");
  }
  check_utf8(options_.version, "RuntimeOptions::version");
  // Read before the store opens: a bad key file fails the construction with nothing written.
  payloads_ = std::make_shared<const Payloads>(options_.codec, options_.encryption_key_file);
  telemetry_.emplace(options_, logger_, *env_, quotes_errors());
  store_ = open_store(options_.database, options_.durability, payloads_);
  watch_changes();
  writer_.alone(
      [&](Store& store) { store.set_version(options_.version, options_.only_own_version); });
  worker_.id = env_->new_id();
  worker_.host = host_identity();
  worker_.pid = ::getpid();
  worker_.start_ticks = process_start_ticks(worker_.pid);
  worker_.started_at_ms = now_ms();
  writer_.alone([&](WorkerStore& store) {
    store.register_worker(worker_, worker_.started_at_ms);
    // Forget the workers of processes on this host that are gone and own nothing any more.
    for (const Worker& worker : store.workers_on(worker_.host)) {
      if (worker.id != worker_.id && !process_alive(worker)) store.remove_idle_worker(worker.id);
    }
  });
}

RuntimeCore::~RuntimeCore() {
  heartbeat_.stop();
  // What is queued goes now, while the logger its failures are reported to still exists.
  telemetry_->close();
  try {
    writer_.alone([&](WorkerStore& store) { store.remove_idle_worker(worker_.id); });
  } catch (...) {
    // Closing must not throw; a leftover row is pruned by the next runtime on this host.
  }
}

std::int64_t RuntimeCore::now_ms() const { return env_->now_ms(); }

void RuntimeCore::set_env(std::shared_ptr<Env> env) {
  if (heartbeat_.started() || pool_ || serving_) {
    throw Error(errc::misuse, "a runtime's Env is given before its threads start");
  }
  // The Env before stays until what was built on it is rebuilt on this one: the change watch
  // (its thread starts with its first wait) and the exporter.
  const std::shared_ptr<Env> before = std::exchange(env_, std::move(env));
  random_.seed(env_->random());
  watch_changes();
  telemetry_->use(*env_);
}

void RuntimeCore::watch_changes() {
  changes_ = std::make_shared<ChangeWatch>(
      [database = options_.database] { return open_change_feed(database); }, options_.poll_interval,
      *env_);
}

void RuntimeCore::add(Workflow wf) {
  if (wf.name().empty()) throw Error(errc::invalid_argument, "a workflow needs a name");
  check_utf8(wf.name(), "the workflow name");
  if (wf.options().retry) check_policy(*wf.options().retry, "workflow '" + wf.name() + "'");
  check_flow(wf.name(), wf.options());
  for (const std::string& event : wf.options().events) {
    if (event.empty())
      throw Error(errc::invalid_argument, "workflow '" + wf.name() + "' lists an empty event name");
    check_utf8(event, "an event name of workflow '" + wf.name() + "'");
  }
  const std::string name = wf.name();
  const std::vector<std::string> events = wf.options().events;
  const std::string flow = flow_rule(wf.options()).stored();
  {
    std::lock_guard lock(workflows_mutex_);
    if (!workflows_.emplace(name, std::make_shared<const Workflow>(std::move(wf))).second) {
      throw Error(errc::invalid_argument, "a workflow named '" + name + "' was already added");
    }
  }
  writer_.alone([&](EventStore& store) { store.register_workflow(name, events, flow, now_ms()); });
}

std::shared_ptr<const Workflow> RuntimeCore::find_workflow(std::string_view name) {
  std::lock_guard lock(workflows_mutex_);
  const auto it = workflows_.find(name);
  return it == workflows_.end() ? nullptr : it->second;
}

void RuntimeCore::unknown_workflow(std::string_view name) {
  std::string known;
  for (const auto& added : workflow_names()) known += (known.empty() ? "" : ", ") + added;
  throw UnknownWorkflow("no workflow named '" + std::string(name) +
                        "' was added to this runtime (added: " + (known.empty() ? "none" : known) +
                        ")");
}

std::vector<std::string> RuntimeCore::workflow_names() {
  std::lock_guard lock(workflows_mutex_);
  std::vector<std::string> names;
  for (const auto& [name, wf] : workflows_) names.push_back(name);
  return names;
}

std::string RuntimeCore::start(std::string_view workflow, json input, StartOptions opts) {
  const std::shared_ptr<const Workflow> wf = find_workflow(workflow);
  if (!wf) unknown_workflow(workflow);
  // Stored form first: it refuses a value nested too deep before anything copies it.
  const NewRun run = new_run(workflow, input, opts, *env_, options_.max_output_bytes);
  wf->check_input(input);
  Writer::Request request;
  request.starts = {&run};
  writer_.write(request);
  const std::string& id = request.ids.front();
  if (run.deadline_ms > 0 || wf->options().deadline.count() > 0) {
    std::lock_guard lock(store_mutex_);
    forget_next_deadline();
  }
  if (id == run.id) {
    telemetry_->started(1);
    logger_.write(LogLevel::info, "run.started", "run started",
                  {{"run_id", id}, {"correlation_id", run.correlation_id}, {"workflow", workflow}},
                  run.now_ms);
  }
  notify_waiters();
  return id;
}

std::optional<json> RuntimeCore::published(std::string_view run_id, std::string_view key,
                                           std::chrono::milliseconds wait) {
  return wait_published(
      *changes_, run_id, key, wait,
      [&] {
        std::lock_guard lock(store_mutex_);
        return store_->published(std::string(run_id), std::string(key));
      },
      "Runtime::published");
}

void RuntimeCore::send_event(std::string_view name, json data) {
  const NewEvent event = new_event(name, data, *env_, options_.max_output_bytes);
  const Published published = writer_.alone([&](EventStore& store) { return store.publish(event); });
  telemetry_->sent_event();
  telemetry_->started(published.started.size());
  logger_.write(LogLevel::info, "event.sent",
                "event stored; woke " + std::to_string(published.woken) +
                    " waiting run(s), started " + std::to_string(published.started.size()),
                {{"event_name", event.name}, {"event_id", event.id}}, event.now_ms);
  notify_waiters();
}

void RuntimeCore::send(std::string_view run_id, std::string_view topic, json message) {
  const NewMessage m = new_message(run_id, topic, message, now_ms(), options_.max_output_bytes);
  const Sent sent = writer_.alone([&](EventStore& store) { return store.send_message(m); });
  message_sent(sent, m);
  logger_.write(LogLevel::info, "message.sent",
                sent == Sent::delivered ? "message stored and received" : "message stored",
                {{"run_id", m.run_id}, {"topic", m.topic}}, m.now_ms);
  notify_waiters();
}

RunInfo RuntimeCore::get(std::string_view run_id) {
  std::lock_guard lock(store_mutex_);
  auto run = store_->get_run(std::string(run_id), true);
  if (!run) throw no_such_run(run_id);
  return std::move(*run);
}

std::vector<RunInfo> RuntimeCore::list(const RunFilter& filter) {
  std::lock_guard lock(store_mutex_);
  return store_->list_runs(filter);
}

VerifyReport RuntimeCore::verify(const RunFilter& filter, const std::string& database) {
  const std::vector<Status> unfinished = {Status::pending, Status::running, Status::sleeping,
                                          Status::waiting, Status::paused};
  // A connection of its own that cannot write, but for a private database, which no other
  // connection sees: then the runtime's own, a run at a time.
  const bool own = database == options_.database &&
                   (options_.database.empty() || options_.database == ":memory:");
  const std::unique_ptr<Store> reader = own ? nullptr : open_store_read_only(database, payloads_);
  const auto read = [&](const auto& from_store) {
    if (reader) return from_store(*reader);
    std::lock_guard lock(store_mutex_);
    return from_store(*store_);
  };
  VerifyReport report;
  const std::vector<std::string> ids =
      read([&](ReadStore& store) { return store.run_ids(filter, unfinished); });
  for (const std::string& id : ids) {
    std::optional<RecordedRun> run = read([&](ReadStore& store) { return store.recorded_run(id); });
    if (!run) continue;  // deleted since (a purge)
    const std::shared_ptr<const Workflow> workflow = find_workflow(run->info.workflow);
    if (workflow == nullptr) continue;  // another binary's
    ++report.runs_checked;
    std::optional<Divergence> divergence;
    if (run->unreadable) {  // the runtime fails such a run when it claims it
      divergence = Divergence{id, run->info.workflow, "", "the run " + *run->unreadable, ""};
    } else {
      divergence = check_replay(*workflow, run->info, std::move(run->journal));
    }
    if (divergence) report.divergences.push_back(std::move(*divergence));
  }
  return report;
}

std::vector<StepInfo> RuntimeCore::steps(std::string_view run_id) {
  std::lock_guard lock(store_mutex_);
  auto steps = store_->list_steps(std::string(run_id));
  if (!steps) throw no_such_run(run_id);
  return std::move(*steps);
}

// Owners of running runs whose process, on this host, is gone: a restarted runtime takes their
// runs over at once instead of waiting for the lease. Looked for at most once a second; the
// owners found stay in every claim until the next look, so all their runs come back, batch
// after batch.
std::vector<std::string> RuntimeCore::dead_owners() {
  const std::int64_t now = now_ms();
  if (now < next_owner_scan_ms_) return dead_owners_;
  next_owner_scan_ms_ = now + 1000;
  dead_owners_.clear();
  for (const Worker& owner : store_->running_owners(worker_.id)) {
    if (owner.host == worker_.host && !process_alive(owner)) dead_owners_.push_back(owner.id);
  }
  return dead_owners_;
}

StepPool& RuntimeCore::step_pool() {
  std::call_once(pool_started_, [this] {
    pool_ =
        std::make_unique<StepPool>(static_cast<std::size_t>(std::max(0, options_.threads)), *env_);
  });
  return *pool_;
}

// What to write for an invocation's outcome: its journal entry and the run's new state.
RunWrite RuntimeCore::write_for(const RunState& run, const Outcome& outcome,
                                std::int64_t& lease_until_ms) {
  RunWrite write;
  write.run_id = run.id;
  write.owner = worker_.id;
  write.entries = &outcome.entries;
  write.first_seq = run.next_seq;
  write.invocations = run.invocations;
  write.now_ms = now_ms();
  write.reason = outcome.reason;
  write.boundary = true;  // the invocation ended: no body of the run is running
  switch (outcome.kind) {
    case Outcome::Kind::step_done:
      // Renew the claim once half of it is used, so a long run keeps it.
      if (write.now_ms + options_.lease.count() / 2 > lease_until_ms) {
        write.renew_lease = true;
        write.due_ms = lease_until_ms = write.now_ms + options_.lease.count();
      }
      break;
    case Outcome::Kind::sleep:
      write.status = Status::sleeping;
      write.due_ms = outcome.wake_at_ms;
      break;
    case Outcome::Kind::completed: {
      std::string text;
      std::optional<std::string> refused;
      if (const auto problem = encode(outcome.output, text)) {
        refused = "the workflow of run " + run.id +
                  " returned a value that cannot be stored: " + *problem;
      } else if (text.size() > options_.max_output_bytes) {
        refused = "the workflow of run " + run.id + " returned " + human_bytes(text.size()) +
                  "; the limit is " + human_bytes(options_.max_output_bytes) +
                  " (RuntimeOptions::max_output_bytes)";
      }
      if (refused) {
        write.status = Status::failed;
        write.error = ErrorInfo{"durable::Error", with_id(errc::too_large, *refused), {}, 0};
        write.reason = *refused;
      } else {
        write.status = Status::completed;
        write.output = std::move(text);
      }
      if (!refused && outcome.successor_input) {
        NewRun next;
        next.id = env_->new_id();
        next.workflow = run.workflow;
        next.correlation_id = run.correlation_id;
        next.input = outcome.successor_input->dump();  // checked storable by the engine
        next.now_ms = next.due_ms = write.now_ms;
        next.reason = "continued from run " + run.id + " (step.continue_as_new)";
        // The successor goes on in its predecessor's trace, under the predecessor's run span.
        next.traceparent = trace::format_traceparent(trace::run_context(run.id, run.traceparent));
        write.successor = std::move(next);
      }
      break;
    }
    case Outcome::Kind::failed:
      write.status = Status::failed;
      write.error = outcome.error;
      break;
    case Outcome::Kind::wait:
      write.status = Status::waiting;
      write.due_ms = outcome.wake_at_ms;
      break;
    case Outcome::Kind::lost:
    case Outcome::Kind::handed_over:
      break;  // conclude() writes nothing for these
  }
  return write;
}

RunInfo RuntimeCore::wait(std::string_view run_id, std::chrono::milliseconds timeout) {
  const auto deadline = env_->steady_now() + timeout;
  const std::vector<std::string> names = workflow_names();
  for (;;) {
    // Read before looking at the store, so a start, retry or cancel after the look is not missed.
    const std::uint64_t seen = wake_generation();
    RunInfo run = get(run_id);
    if (ended(run.status)) return run;
    run_due(deadline, 1);  // one run at a time, so the deadline is looked at between runs
    run = get(run_id);
    if (ended(run.status) || env_->steady_now() >= deadline) return run;
    std::optional<std::int64_t> due;
    {
      std::lock_guard lock(store_mutex_);
      due = store_->next_due(names, {executing_.begin(), executing_.end()});
    }
    auto pause = options_.poll_interval;
    if (due) {
      // Not below kMinPause: a run due now that cannot be claimed must not make this spin.
      pause = std::min(pause, std::chrono::milliseconds(std::max(kMinPause, *due - now_ms())));
    }
    std::unique_lock lock(wake_mutex_);
    env_->wait_until(wake_, lock, std::min(deadline, env_->steady_now() + pause),
                     [&] { return wake_generation_ != seen; });
  }
}

void RuntimeCore::notify_waiters() {
  {
    std::lock_guard lock(wake_mutex_);
    ++wake_generation_;
  }
  wake_.notify_all();
  wake_loops();
  std::lock_guard lock(serve_mutex_);
  if (serve_wake_) serve_wake_();
}

std::uint64_t RuntimeCore::wake_generation() {
  std::lock_guard lock(wake_mutex_);
  return wake_generation_;
}

}  // namespace durable::detail

namespace durable {

Runtime::Runtime(RuntimeOptions opts)
    : core_(std::make_unique<detail::RuntimeCore>(std::move(opts))) {}
Runtime::~Runtime() = default;
void Runtime::add(Workflow wf) { core_->add(std::move(wf)); }
std::string Runtime::start(std::string_view workflow, json input, StartOptions opts) {
  return core_->start(workflow, std::move(input), std::move(opts));
}
RunInfo Runtime::get(std::string_view run_id) const { return core_->get(run_id); }
std::vector<RunInfo> Runtime::list(const RunFilter& filter) const { return core_->list(filter); }
VerifyReport Runtime::verify(const RunFilter& filter) const {
  return core_->verify(filter, core_->options().database);
}
std::vector<StepInfo> Runtime::steps(std::string_view run_id) const { return core_->steps(run_id); }
void Runtime::cancel(std::string_view run_id, std::string reason) {
  core_->control().cancel(run_id, reason);
}
void Runtime::retry(std::string_view run_id) { core_->control().retry(run_id); }
std::size_t Runtime::cancel(const RunFilter& filter, std::string reason) {
  return core_->control().bulk(detail::BulkAction::cancel, filter, reason);
}
std::size_t Runtime::retry(const RunFilter& filter) {
  return core_->control().bulk(detail::BulkAction::retry, filter, {});
}
std::size_t Runtime::purge(const RunFilter& filter) {
  return core_->control().bulk(detail::BulkAction::purge, filter, {});
}
std::size_t Runtime::count(const RunFilter& filter) const { return core_->control().count(filter); }
std::vector<StepProgress> Runtime::progress(std::string_view run_id) const {
  return core_->control().progress(run_id);
}
void Runtime::forget(std::string_view correlation_id) { core_->control().forget(correlation_id); }
void Runtime::pause(std::string_view run_id) { core_->control().pause(run_id); }
void Runtime::resume(std::string_view run_id) { core_->control().resume(run_id); }
std::size_t Runtime::pause_workflow(std::string_view workflow) {
  return core_->control().pause_workflow(workflow);
}
std::size_t Runtime::resume_workflow(std::string_view workflow) {
  return core_->control().resume_workflow(workflow);
}
std::vector<std::string> Runtime::paused_workflows() const {
  return core_->control().paused_workflows();
}
std::string Runtime::fork(std::string_view run_id, std::string_view from_step) {
  return core_->control().fork(run_id, from_step);
}
void Runtime::resolve(std::string_view run_id, std::string_view step_key, json output,
                      std::string reason) {
  core_->control().resolve(run_id, step_key, std::move(output), reason);
}
std::size_t Runtime::run_until_idle() { return core_->run_until_idle(); }
RunInfo Runtime::wait(std::string_view run_id, std::chrono::milliseconds timeout) {
  return core_->wait(run_id, timeout);
}
std::optional<json> Runtime::published(std::string_view run_id, std::string_view key,
                                       std::chrono::milliseconds wait) const {
  return core_->published(run_id, key, wait);
}
void Runtime::send_event(std::string_view name, json data) {
  core_->send_event(name, std::move(data));
}
void Runtime::send(std::string_view run_id, std::string_view topic, json message) {
  core_->send(run_id, topic, std::move(message));
}
std::string Runtime::schedule(std::string_view workflow, json input, Schedule when) {
  return core_->schedules().schedule(workflow, input, when);
}
std::vector<ScheduleInfo> Runtime::schedules() const { return core_->schedules().list(); }
void Runtime::unschedule(std::string_view schedule_id) {
  core_->schedules().unschedule(schedule_id);
}
void Runtime::serve() { core_->serve(); }
void Runtime::stop() { core_->stop(); }
std::string Runtime::http_url() const { return core_->http_url(); }
Counters Runtime::counters() const { return core_->counters(); }

}  // namespace durable
