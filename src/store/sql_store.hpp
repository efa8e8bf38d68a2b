// SPDX-License-Identifier: Apache-2.0
#pragma once
// The store over an SQL database: the durable-execution rules written once, for every database
// that implements sql::Connection (SQLite in sqlite/, PostgreSQL in postgres/). Times are
// milliseconds since the Unix epoch. SqlStore holds the store's parts (store/parts.hpp, one
// class per concern over the shared SqlTables) and answers the Store interface with them.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store.hpp"
#include "store/parts.hpp"
#include "store/tables.hpp"

namespace durable::detail {

class SqlStore : public Store {
 public:
  /// `name` says which database, in messages: "database '<name>': ...".
  SqlStore(std::unique_ptr<sql::Connection> db, std::string name);
  /// The parts hold references to each other and the tables: a store stays where it was made.
  SqlStore(const SqlStore&) = delete;
  SqlStore& operator=(const SqlStore&) = delete;

  std::string create_run(const NewRun& run) override { return interventions_.create_run(run); }
  std::optional<RunInfo> get_run(const std::string& id, bool with_history) override {
    return reads_.get_run(id, with_history);
  }
  std::vector<RunInfo> list_runs(const RunFilter& filter) override {
    return reads_.list_runs(filter);
  }
  std::vector<std::string> run_ids(const RunFilter& filter,
                                   const std::vector<Status>& statuses) override {
    return reads_.run_ids(filter, statuses);
  }
  std::optional<RecordedRun> recorded_run(const std::string& id) override {
    return reads_.recorded_run(id);
  }
  std::optional<std::vector<StepInfo>> list_steps(const std::string& id) override {
    return reads_.list_steps(id);
  }
  std::optional<RunWithSteps> get_run_with_steps(const std::string& id) override {
    return reads_.get_run_with_steps(id);
  }
  std::optional<std::vector<JournalEntry>> journal(const std::string& id) override {
    return reads_.journal(id);
  }

  Claimed claim(const ClaimRequest& request) override { return claims_.claim(request); }
  Written commit(const RunWrite& write) override { return commits_.commit(write); }
  GroupWritten write_group(const WriteGroup& group) override { return commits_.write_group(group); }
  std::optional<std::int64_t> next_due(const std::vector<std::string>& workflows,
                                       const std::vector<std::string>& executing) override {
    return claims_.next_due(workflows, executing);
  }
  std::size_t due_count(const std::vector<std::string>& workflows,
                        const std::vector<std::string>& executing, std::int64_t now_ms,
                        std::size_t limit) override {
    return claims_.due_count(workflows, executing, now_ms, limit);
  }
  bool release(const std::string& id, const std::string& owner, std::int64_t now_ms,
               const std::string& reason) override {
    return claims_.release(id, owner, now_ms, reason);
  }
  std::optional<Status> cancel(const std::string& id, std::int64_t now_ms,
                               const std::string& reason) override {
    return interventions_.cancel(id, now_ms, reason);
  }
  bool retry(const std::string& id, std::int64_t now_ms) override {
    return interventions_.retry(id, now_ms);
  }
  bool resolve(const std::string& id, const std::string& key, const std::string& output,
               const std::string& reason, std::int64_t now_ms, const ResolveCheck& check) override {
    return interventions_.resolve(id, key, output, reason, now_ms, check);
  }
  bool fork(NewRun& fork, const std::string& from_key) override {
    return interventions_.fork(fork, from_key);
  }
  std::optional<Status> pause(const std::string& id, std::int64_t now_ms) override {
    return interventions_.pause(id, now_ms);
  }
  std::optional<Status> resume(const std::string& id, std::int64_t now_ms) override {
    return interventions_.resume(id, now_ms);
  }
  std::size_t pause_workflow(const std::string& workflow, std::int64_t now_ms) override {
    return interventions_.pause_workflow(workflow, now_ms);
  }
  std::size_t resume_workflow(const std::string& workflow, std::int64_t now_ms) override {
    return interventions_.resume_workflow(workflow, now_ms);
  }
  std::vector<std::string> paused_workflows() override { return interventions_.paused_workflows(); }
  std::vector<std::string> expire(std::int64_t now_ms, std::size_t limit) override {
    return interventions_.expire(now_ms, limit);
  }
  std::optional<std::int64_t> next_deadline() override { return interventions_.next_deadline(); }
  std::size_t delete_runs(const std::vector<std::string>& ids) override {
    return interventions_.delete_runs(ids);
  }
  std::vector<std::string> ended_before(std::int64_t before_ms, std::size_t limit) override {
    return interventions_.ended_before(before_ms, limit);
  }
  std::vector<std::string> forget(const std::string& correlation_id, std::int64_t now_ms) override {
    return interventions_.forget(correlation_id, now_ms);
  }
  void set_version(const std::string& version, bool only_own) override {
    tables_.set_version(version, only_own);
  }

  Published publish(const NewEvent& event) override { return waits_.publish(event); }
  PublishedRead published(const std::string& run_id,
                          const std::optional<std::string>& key) override {
    return outputs_.published(run_id, key);
  }
  Sent send_message(const NewMessage& message) override { return waits_.send_message(message); }
  StreamRows read_stream(const std::string& run_id, const std::string& name, std::int64_t from,
                         std::size_t limit) override {
    return outputs_.read_stream(run_id, name, from, limit);
  }
  std::optional<std::vector<StreamSummary>> streams_of(const std::string& run_id) override {
    return outputs_.streams_of(run_id);
  }
  std::int64_t event_horizon() override { return waits_.event_horizon(); }
  void register_workflow(const std::string& workflow, const std::vector<std::string>& events,
                         const std::string& flow, std::int64_t now_ms) override {
    waits_.register_workflow(workflow, events, flow, now_ms);
  }
  std::size_t purge_events(std::int64_t before_ms, std::size_t limit) override {
    return waits_.purge_events(before_ms, limit);
  }

  bool put_schedule(const ScheduleRow& schedule, std::int64_t now_ms) override {
    return schedules_.put_schedule(schedule, now_ms);
  }
  bool remove_schedule(const std::string& id) override { return schedules_.remove_schedule(id); }
  std::vector<ScheduleInfo> list_schedules() override { return schedules_.list_schedules(); }
  std::optional<std::int64_t> next_schedule_at() override { return schedules_.next_schedule_at(); }
  std::vector<std::string> fire_schedules(
      std::int64_t now_ms,
      const std::function<std::optional<std::int64_t>(const ScheduleRow&, std::int64_t)>& next)
      override {
    return schedules_.fire_schedules(now_ms, next);
  }
  Backlog backlog(std::int64_t now_ms) override { return claims_.backlog(now_ms); }
  std::optional<StepProgress> progress(const std::string& run_id, const std::string& key) override {
    return outputs_.progress(run_id, key);
  }
  std::vector<StepProgress> progress_of(const std::string& run_id) override {
    return outputs_.progress_of(run_id);
  }

  void register_worker(const Worker& worker, std::int64_t now_ms) override {
    workers_.register_worker(worker, now_ms);
  }
  void touch_worker(const Worker& worker, std::int64_t now_ms, std::int64_t lease_ms,
                    const std::string& counters) override {
    workers_.touch_worker(worker, now_ms, lease_ms, counters);
  }
  std::size_t forget_dead_workers(std::int64_t now_ms) override {
    return workers_.forget_dead_workers(now_ms);
  }
  std::vector<Worker> workers_on(const std::string& host) override {
    return workers_.workers_on(host);
  }
  void remove_idle_worker(const std::string& id) override { workers_.remove_idle_worker(id); }
  std::vector<Worker> running_owners(const std::string& self) override {
    return workers_.running_owners(self);
  }

  std::size_t write_transactions() const override { return commits_.write_transactions(); }
  void set_payloads(std::shared_ptr<const Payloads> payloads) override {
    tables_.set_payloads(std::move(payloads));
  }

 protected:
  sql::Connection& db() { return tables_.db(); }
  const std::string& name() const { return tables_.name(); }
  [[noreturn]] void fail(const std::string& what, ErrorCode code = errc::database) const {
    tables_.fail(what, code);
  }
  /// Closes the connection; only a destructor that must outlive it calls this.
  void close() { tables_.close(); }
  /// A new connection, set up as the first, after the old one broke (Fault::connection). The
  /// default: none can be made (SQLite's connection to a file does not break).
  virtual std::unique_ptr<sql::Connection> reconnect();
  /// SqlTables::guarded, for a subclass's own calls to its database.
  template <class F>
  std::invoke_result_t<F&> guarded(F&& body) {
    return tables_.guarded(std::forward<F>(body));
  }

 private:
  SqlTables tables_;
  RunLifecycle lifecycle_{tables_};
  RunReads reads_{tables_};
  WorkerTable workers_{tables_};
  RunOutputs outputs_{tables_};
  Waits waits_{tables_, lifecycle_};
  Commits commits_{tables_, lifecycle_, waits_, outputs_, workers_};
  Claims claims_{tables_, lifecycle_, reads_, waits_};
  Interventions interventions_{tables_, lifecycle_, reads_, waits_, outputs_, commits_};
  ScheduleTable schedules_{tables_, lifecycle_};
};

}  // namespace durable::detail
