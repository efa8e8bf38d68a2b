// SPDX-License-Identifier: Apache-2.0
#include "admin.hpp"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <set>
#include <sstream>

#include "admin_pool.hpp"
#include "durations.hpp"
#include "env.hpp"
#include "errors_internal.hpp"
#include "ops_queries.hpp"
#include "run_requests.hpp"
#include "serialization.hpp"
#include "store.hpp"
#include "trace_context.hpp"

namespace durable::ops {

namespace {

constexpr std::int64_t kDayMs = 24 * 3600 * 1000;

std::string iso(std::int64_t ms) { return detail::utc_text(ms); }
std::string iso(Clock::time_point t) { return iso(detail::to_ms(t)); }

// A running run whose lease lapsed at `now_ms`: its holder stopped renewing the claim (killed,
// hung or cut off from the file), and the next claim by any worker takes it over.
bool orphaned(const RunInfo& run, std::int64_t now_ms) {
  return run.status == Status::running && run.lease_until &&
         detail::to_ms(*run.lease_until) < now_ms;
}

json summary(const RunInfo& run, const std::set<std::string>& known, std::int64_t now_ms) {
  json j = {{"id", run.id},
            {"workflow", run.workflow},
            {"status", to_string(run.status)},
            {"correlation_id", run.correlation_id},
            {"created_at", iso(run.created_at)},
            {"updated_at", iso(run.updated_at)},
            {"invocations", run.invocations},
            {"known", known.contains(run.workflow)}};
  if (run.wake_at) j["wake_at"] = iso(*run.wake_at);
  if (run.began_at) j["began_at"] = iso(*run.began_at);
  if (!run.parent_id.empty()) j["parent_id"] = run.parent_id;
  if (!run.version.empty()) j["version"] = run.version;
  if (!run.forked_from.empty()) j["forked_from"] = run.forked_from;
  if (!run.continued_as.empty()) j["continued_as"] = run.continued_as;
  if (run.priority != 0) j["priority"] = run.priority;
  if (run.deadline) j["deadline"] = iso(*run.deadline);
  if (!run.tags.empty()) j["tags"] = run.tags;
  if (run.pausing) j["pausing"] = true;
  if (run.error) j["error"] = detail::error_to_json(*run.error);
  if (!run.worker.empty()) j["worker"] = run.worker;
  if (run.lease_until) j["lease_until"] = iso(*run.lease_until);
  j["orphaned"] = orphaned(run, now_ms);
  return j;
}

json step_json(const StepInfo& s) {
  json j = {{"id", s.id},         {"kind", s.kind},
            {"status", s.status}, {"attempts", s.attempts},
            {"output", s.output}, {"updated_at", iso(s.updated_at)}};
  if (s.error) j["error"] = detail::error_to_json(*s.error);
  if (s.wake_at) j["wake_at"] = iso(*s.wake_at);
  if (s.duration) j["duration_ms"] = s.duration->count();
  if (s.started_at) j["started_at"] = iso(*s.started_at);
  if (!s.resolved.empty()) j["resolved"] = s.resolved;
  return j;
}

json counts_json(const std::map<std::string, std::int64_t>& counts) {
  json j = json::object();
  std::int64_t total = 0;
  for (const Status status : kStatuses) {
    const auto it = counts.find(std::string(to_string(status)));
    const std::int64_t n = it == counts.end() ? 0 : it->second;
    j[std::string(to_string(status))] = n;
    total += n;
  }
  return json{{"counts", j}, {"total", total}};
}

// What the command or the request may not ask for: a clear 400.
template <class F>
auto as_bad_request(F&& body) {
  try {
    return body();
  } catch (const NotFound&) {
    throw;
  } catch (const BadRequest&) {
    throw;
  } catch (const Error& e) {
    throw BadRequest(std::string(detail::message_of(e)));
  }
}

// A traceparent a request carried: W3C Trace Context has a receiver drop one it cannot read and
// start a trace of its own, rather than refuse the request.
std::string usable_traceparent(std::string_view text) {
  namespace trace = ::durable::detail::trace;
  const std::optional<trace::TraceParent> parent = trace::parse_traceparent(text);
  return parent ? trace::format_traceparent(*parent) : std::string();  // a later version's tail
}

}  // namespace

Admin::Admin(const std::string& database, std::function<void()> on_change,
             durable::detail::Env* env, Durability durability, std::size_t max_connections,
             bool read_only, std::shared_ptr<const durable::detail::Payloads> payloads)
    : on_change_(std::move(on_change)),
      env_(env != nullptr ? env : &durable::detail::Env::system()),
      path_(database),
      durability_(durability),
      max_connections_(std::max<std::size_t>(1, max_connections)),
      read_only_(read_only),
      payloads_(std::move(payloads)) {
  if (database.empty() || database == ":memory:") {
    throw Error(errc::config, "the admin API needs a database file, not '" + database + "'");
  }
  // Absolute, so that the runbook's commands work from any directory; a URI as it is, with its
  // password masked (the runbook is served over HTTP).
  std::error_code ignored;
  database_ = detail::is_postgres_uri(database)
                  ? "'" + detail::shown_database(database) + "'"
                  : std::filesystem::absolute(database, ignored).string();
  if (database_.empty()) database_ = database;
  // The first connection creates or migrates the file, and says now if it cannot be opened.
  idle_.push_back(open_connection());
  opened_ = 1;
}

Admin::~Admin() = default;

std::unique_ptr<Admin::Connection> Admin::open_connection() const {
  auto connection = std::make_unique<Connection>();
  connection->store =
      detail::open_store(path_, durability_, payloads_,
                         read_only_ ? detail::Access::read_only : detail::Access::read_write);
  connection->queries = detail::open_ops_queries(path_);
  return connection;
}

// An idle connection, else a new one while fewer than max_connections are open, else the next
// one given back. A new one is opened outside the mutex: opening waits on the file, and other
// calls must not wait on that.
Admin::Lease Admin::lease() {
  std::unique_lock lock(mutex_);
  returned_.wait(lock, [this] { return !idle_.empty() || opened_ < max_connections_; });
  if (!idle_.empty()) {
    std::unique_ptr<Connection> connection = std::move(idle_.back());
    idle_.pop_back();
    return Lease(*this, std::move(connection));
  }
  ++opened_;
  lock.unlock();
  try {
    return Lease(*this, open_connection());
  } catch (...) {
    lock.lock();
    --opened_;
    returned_.notify_one();
    throw;
  }
}

void Admin::give_back(std::unique_ptr<Connection> connection) {
  {
    std::lock_guard lock(mutex_);
    idle_.push_back(std::move(connection));
  }
  returned_.notify_one();
}

std::int64_t Admin::now_ms() const { return env_->now_ms(); }

void Admin::changed() const {
  if (on_change_) on_change_();
}

std::set<std::string> Admin::known(Connection& db) {
  const std::vector<std::string> names = db.queries->known_workflows();
  return {names.begin(), names.end()};
}

json Admin::list(const RunQuery& query) {
  const Lease db = lease();
  RunFilter filter = query.filter();
  ++filter.limit;  // one more than asked: whether a next page has any run
  std::vector<RunInfo> found = db->store->list_runs(filter);
  json next_cursor;  // null: this page is the last
  if (query.limit > 0 && found.size() > query.limit) {
    found.resize(query.limit);
    next_cursor = found.back().cursor;
  }
  const std::set<std::string> names = known(*db);
  json runs = json::array();
  const std::int64_t now = now_ms();
  for (const RunInfo& run : found) runs.push_back(summary(run, names, now));
  json answer = counts_json(db->queries->count_runs(query.workflow, query.correlation_id));
  answer["runs"] = std::move(runs);
  answer["next_cursor"] = std::move(next_cursor);
  return answer;
}

json Admin::show(std::string_view id) {
  const Lease db = lease();
  const std::optional<detail::RunWithSteps> found = db->store->get_run_with_steps(std::string(id));
  if (!found) throw NotFound("no run with id '" + std::string(id) + "'");
  const RunInfo& run = found->run;
  const std::vector<StepInfo>& steps = found->steps;
  json j = summary(run, known(*db), now_ms());
  j["input"] = run.input;
  j["output"] = run.output;
  j["history"] = json::array();
  for (const Transition& t : run.history) {
    j["history"].push_back(
        {{"status", to_string(t.status)}, {"at", iso(t.at)}, {"reason", t.reason}});
  }
  j["steps"] = json::array();
  for (const StepInfo& s : steps) j["steps"].push_back(step_json(s));
  // What the bodies of steps not completed yet last reported (StepContext::heartbeat).
  j["progress"] = json::array();
  for (const StepProgress& p : db->store->progress_of(std::string(id))) {
    j["progress"].push_back(
        {{"step", p.step}, {"attempt", p.attempt}, {"progress", p.progress}, {"at", iso(p.at)}});
  }
  j["runbook"] = run.status == Status::failed ? runbook(*db, run, steps) : json();
  return j;
}

// What failed, where, how often, what to check, and the commands that retry it.
json Admin::runbook(Connection& db, const RunInfo& run, const std::vector<StepInfo>& steps) {
  const ErrorInfo error = run.error.value_or(ErrorInfo{"unknown", "no error was recorded", {}, 0});
  json book = {{"failed_step", error.step_id},
               {"error", detail::error_to_json(error)},
               {"failed_at", iso(run.updated_at)},
               {"retry_command", "durable --db " + database_ + " retry " + run.id},
               {"retry_http", "POST /v1/runs/" + run.id + "/retry"}};
  const auto step = std::find_if(steps.begin(), steps.end(),
                                 [&](const StepInfo& s) { return s.id == error.step_id; });
  const int attempts = step != steps.end() ? step->attempts : error.attempts;
  book["step_kind"] = step != steps.end() ? json(step->kind) : json();
  book["attempts"] = attempts;
  const std::int64_t alike = db.queries->failures_alike(run.workflow, error.step_id, error.type,
                                                        now_ms() - kDayMs, run.id);
  book["similar_failures"] = alike;
  // durable's own error: its id, which docs/errors.md explains.
  const std::string_view id = detail::error_id(error.message);
  book["error_id"] = id.empty() ? json() : json(id);

  std::vector<std::string> checks;
  const std::string said = error.type + ": " + error.message;
  if (error.type == "durable::NonDeterminism") {
    book["summary"] = "the code no longer matches the run's journal: " + error.message;
    checks.push_back(
        "A deploy changed a step this run had already journaled. Restore the step's old id (or "
        "kind) in the code, deploy, then retry: the run resumes where it stopped.");
  } else if (error.step_id.empty()) {
    book["summary"] = "the workflow function threw outside any step: " + said;
    checks.push_back(
        "The exception came from the workflow's own code, not from a step body: "
        "fix it and deploy, then retry. Completed steps do not run again.");
  } else {
    book["summary"] = "step '" + error.step_id + "' failed for good after " +
                      std::to_string(attempts) + " attempt" + (attempts == 1 ? "" : "s") + ": " +
                      said;
    checks.push_back("The last attempt's error: " + said +
                     ". Check the service or resource that step calls.");
    if (error.type == "durable::NonRetryableError") {
      checks.push_back(
          "The step marked the failure permanent (NonRetryableError): fix its cause "
          "(often the input) before retrying.");
    }
  }
  if (alike > 0) {
    checks.push_back(
        std::to_string(alike) + " other run" + (alike == 1 ? "" : "s") + " of '" + run.workflow +
        "' failed at this step with " + error.type +
        " in the last 24 h: likely a dependency "
        "outage or a bad deploy rather than this run's input. List them: durable --db " +
        database_ + " runs --status failed --workflow " + run.workflow);
  } else {
    checks.push_back("No other run of '" + run.workflow + "' failed at this step with " +
                     error.type + " in the last 24 h: look at this run's input.");
  }
  checks.push_back(
      "Once the cause is fixed, retry: completed steps keep their results and only "
      "the failed step runs again.");
  book["checks"] = checks;
  return book;
}

json Admin::steps(std::string_view id) {
  const Lease db = lease();
  const auto steps = db->store->list_steps(std::string(id));
  if (!steps) throw NotFound("no run with id '" + std::string(id) + "'");
  json list = json::array();
  for (const StepInfo& s : *steps) list.push_back(step_json(s));
  return {{"steps", std::move(list)}};
}

json Admin::start(const StartRequest& request) {
  StartOptions opts;
  opts.idempotency_key = request.idempotency_key;
  opts.correlation_id = request.correlation_id;
  opts.priority = request.priority;
  opts.tags = request.tags;
  opts.traceparent = usable_traceparent(request.traceparent);
  detail::NewRun run = as_bad_request([&] {
    if (!request.deadline.empty()) {
      opts.deadline = Clock::time_point(
          std::chrono::milliseconds(detail::deadline_from_text(request.deadline, now_ms())));
    }
    return detail::new_run(request.workflow, request.input, opts, *env_, max_data_bytes_);
  });
  const Lease db = lease();
  const bool is_known = known(*db).contains(request.workflow);
  if (!is_known && !request.queue_unknown) {
    throw UnknownWorkflow("no worker has registered a workflow named '" + request.workflow +
                          "'; start the worker that adds it first");
  }
  if (!is_known) detail::mark_unregistered(run);
  const std::string id = db->store->create_run(run);
  changed();
  return {{"id", id}, {"created", id == run.id}, {"known", is_known}};
}

json Admin::cancel(std::string_view id, const std::string& reason) {
  const Lease db = lease();
  // The status is read in the cancel's own transaction: a run that ended meanwhile is refused.
  const std::optional<Status> before = db->store->cancel(std::string(id), now_ms(), reason);
  if (!before) throw NotFound("no run with id '" + std::string(id) + "'");
  if (*before == Status::completed || *before == Status::cancelled) {
    throw Conflict("run " + std::string(id) + " already ended (" + std::string(to_string(*before)) +
                   "): there is nothing to cancel");
  }
  changed();
  const auto run = db->store->get_run(std::string(id), false);
  return {{"id", id}, {"status", run ? to_string(run->status) : "cancelled"}};
}

json Admin::retry(std::string_view id) {
  const Lease db = lease();
  // The state is checked in the retry's own transaction. A database error is not the run's
  // state: it stays an Error (HTTP 503, exit 1).
  bool found = false;
  try {
    found = db->store->retry(std::string(id), now_ms());
  } catch (const detail::RunStateRefused& e) {
    throw Conflict(std::string(detail::message_of(e)));
  }
  if (!found) throw NotFound("no run with id '" + std::string(id) + "'");
  changed();
  const auto run = db->store->get_run(std::string(id), false);
  return {{"id", id}, {"status", run ? to_string(run->status) : "pending"}};
}

json Admin::fork(std::string_view id, const std::string& from_step) {
  detail::NewRun fork = detail::new_fork(id, *env_);
  const Lease db = lease();
  bool found = false;
  try {
    found = db->store->fork(fork, from_step);
  } catch (const detail::RunStateRefused& e) {
    throw Conflict(std::string(detail::message_of(e)));
  }
  if (!found) throw detail::no_such_run(id);
  changed();
  return {{"id", fork.id}, {"forked_from", id}};
}

json Admin::resolve(std::string_view id, const std::string& step, const json& output,
                    const std::string& reason) {
  const std::string text =
      as_bad_request([&] { return detail::resolution_text(id, step, output, max_data_bytes_); });
  const Lease db = lease();
  detail::Store::ResolveCheck check;
  if (resolve_check_) {
    check = [&](const detail::RecordedRun& run) {
      as_bad_request([&] {
        resolve_check_(run, step, output);
        return 0;
      });
    };
  }
  bool found = false;
  try {
    found = db->store->resolve(std::string(id), step, text, detail::utf8_or_replaced(reason),
                               now_ms(), check);
  } catch (const detail::RunStateRefused& e) {
    throw Conflict(std::string(detail::message_of(e)));
  }
  if (!found) throw detail::no_such_run(id);
  changed();
  const auto run = db->store->get_run(std::string(id), false);
  return {{"id", id}, {"step", step}, {"status", run ? to_string(run->status) : "pending"}};
}

json Admin::send_event(std::string_view name, const json& data, std::string_view traceparent) {
  detail::NewEvent event =
      as_bad_request([&] { return detail::new_event(name, data, *env_, max_data_bytes_); });
  event.traceparent = usable_traceparent(traceparent);
  const Lease db = lease();
  const detail::Published published = db->store->publish(event);
  changed();
  return {{"id", event.id}, {"woken", published.woken}, {"started", published.started}};
}

json Admin::send(std::string_view run_id, std::string_view topic, const json& message) {
  const detail::NewMessage m = as_bad_request(
      [&] { return detail::new_message(run_id, topic, message, now_ms(), max_data_bytes_); });
  const Lease db = lease();
  bool delivered = false;
  try {
    delivered = detail::message_sent(db->store->send_message(m), m);
  } catch (const detail::RunStateRefused& e) {
    throw Conflict(std::string(detail::message_of(e)));
  }
  changed();
  return {{"run_id", m.run_id}, {"topic", m.topic}, {"received", delivered}};
}

json Admin::stats() {
  const Lease db = lease();
  const std::int64_t now = now_ms();
  const std::map<std::string, std::int64_t> counts = db->queries->count_runs("", "");
  json j = counts_json(counts);
  const detail::Backlog backlog = db->store->backlog(now);
  j["pending_depth"] = backlog.depth;
  j["oldest_pending_age_seconds"] =
      backlog.oldest_due_ms ? json(std::max<std::int64_t>(0, now - *backlog.oldest_due_ms) / 1000.0)
                            : json();
  const detail::StepTotals totals = db->queries->step_totals();
  j["steps"] = totals.steps;
  j["retries"] = totals.retries;
  j["failed_steps"] = totals.failed_steps;
  j["failed_runs"] = j["counts"]["failed"];
  j["workers"] = db->queries->live_workers(now);
  j["workflows"] = db->queries->known_workflows();
  j["paused_workflows"] = db->store->paused_workflows();
  return j;
}

json Admin::schedules() {
  const Lease db = lease();
  json list = json::array();
  for (const ScheduleInfo& s : db->store->list_schedules()) {
    list.push_back({{"id", s.id},
                    {"workflow", s.workflow},
                    {"input", s.input},
                    {"every_ms", s.every.count()},
                    {"cron", s.cron},
                    {"remaining", s.remaining ? json(*s.remaining) : json()},
                    {"next_at", iso(s.next_at)},
                    {"fired", s.fired}});
  }
  return {{"schedules", std::move(list)}};
}

void Admin::unschedule(std::string_view id) {
  const Lease db = lease();
  if (!db->store->remove_schedule(std::string(id))) {
    throw NotFound("no schedule with id '" + std::string(id) + "'");
  }
  changed();
}

}  // namespace durable::ops
