// SPDX-License-Identifier: Apache-2.0
// Run control on a Runtime: pausing and resuming runs and workflows, and failing the runs
// that pass their deadlines.

#include <algorithm>

#include "bulk.hpp"
#include "run_requests.hpp"
#include "runtime_core.hpp"
#include "serialization.hpp"

namespace durable::detail {

void RuntimeCore::pause(std::string_view run_id) {
  const std::optional<Status> before =
      writer_.alone([&](Store& store) { return store.pause(std::string(run_id), now_ms()); });
  if (!before) throw no_such_run(run_id);
  logger_.write(LogLevel::info, "run.pause",
                *before == Status::running ? "pause asked for: the run pauses at its next step"
                                           : "run paused",
                {{"run_id", std::string(run_id)}}, now_ms());
}

void RuntimeCore::resume(std::string_view run_id) {
  const std::optional<Status> before =
      writer_.alone([&](Store& store) { return store.resume(std::string(run_id), now_ms()); });
  if (!before) throw no_such_run(run_id);
  logger_.write(LogLevel::info, "run.resumed", "run resumed", {{"run_id", std::string(run_id)}},
                now_ms());
  notify_waiters();
}

std::size_t RuntimeCore::pause_workflow(std::string_view workflow) {
  if (workflow.empty()) throw Error(errc::invalid_argument, "pause_workflow needs a workflow name");
  check_utf8(workflow, "the workflow name");
  const std::size_t paused = writer_.alone(
      [&](Store& store) { return store.pause_workflow(std::string(workflow), now_ms()); });
  logger_.write(LogLevel::info, "workflow.paused",
                "workflow paused with " + std::to_string(paused) + " run(s)",
                {{"workflow", std::string(workflow)}}, now_ms());
  return paused;
}

std::size_t RuntimeCore::resume_workflow(std::string_view workflow) {
  if (workflow.empty())
    throw Error(errc::invalid_argument, "resume_workflow needs a workflow name");
  check_utf8(workflow, "the workflow name");
  const std::size_t resumed = writer_.alone(
      [&](Store& store) { return store.resume_workflow(std::string(workflow), now_ms()); });
  logger_.write(LogLevel::info, "workflow.resumed",
                "workflow resumed with " + std::to_string(resumed) + " run(s)",
                {{"workflow", std::string(workflow)}}, now_ms());
  notify_waiters();
  return resumed;
}

std::vector<std::string> RuntimeCore::paused_workflows() {
  std::lock_guard lock(store_mutex_);
  return store_->paused_workflows();
}

std::optional<std::int64_t> RuntimeCore::next_deadline() {
  return next_deadline_.get(*env_, options_.poll_interval,
                            [this] { return store_->next_deadline(); });
}

std::size_t RuntimeCore::expire_deadlines() {
  // In batches, so that a flood of runs past their deadline holds no write lock for long.
  constexpr std::size_t kBatch = 100;
  const std::int64_t now = now_ms();
  {
    std::lock_guard lock(store_mutex_);
    const std::optional<std::int64_t> next = next_deadline();
    if (!next || *next > now) return 0;  // a write only when one is due
  }
  const std::vector<std::string> failed = writer_.alone([&](Store& store) {
    std::vector<std::string> expired = store.expire(now, kBatch);
    forget_next_deadline();  // under the store's lock, as the writer holds it
    return expired;
  });
  telemetry_->failed(failed.size());
  for (const std::string& id : failed) {
    logger_.write(LogLevel::warn, "run.deadline", "run failed: it passed its deadline",
                  {{"run_id", id}}, now);
  }
  if (!failed.empty()) notify_waiters();
  return failed.size();
}

// The runtime's store, for a bulk action: each batch a write of its own through the writer.
WithStore RuntimeCore::bulk_store() {
  return [this](const std::function<void(Store&)>& use) { writer_.alone(use); };
}

std::size_t RuntimeCore::count(const RunFilter& filter) {
  std::lock_guard lock(store_mutex_);
  return store_->run_ids(filter, {}).size();
}

std::size_t RuntimeCore::bulk(BulkAction action, const RunFilter& filter,
                              const std::string& reason) {
  const std::size_t changed =
      bulk_apply(bulk_store(), action, filter, reason, [this] { return now_ms(); });
  logger_.write(
      LogLevel::info, "runs.bulk",
      std::string(to_string(action)) + " by filter: " + std::to_string(changed) + " run(s)",
      {{"action", to_string(action)}, {"runs", changed}}, now_ms());
  if (action != BulkAction::purge) notify_waiters();
  return changed;
}

std::chrono::milliseconds RuntimeCore::purge_expired_runs() {
  // A round deletes at most kRounds batches, the database released between them; while runs of
  // that age are left the next round comes at once, else after a tenth of the retention (at
  // most a minute).
  constexpr int kRounds = 4;
  const std::int64_t retention = options_.retention.count();
  const std::int64_t now = now_ms();
  if (halted_) return options_.poll_interval;  // the crash sweep's crash: nothing more is written
  std::size_t deleted = 0;
  bool more = false;
  try {
    constexpr std::size_t kBatch = 500;
    for (int round = 0; round < kRounds; ++round) {
      const std::size_t n = writer_.alone([&](Store& store) {  // the store let go between batches
        return store.delete_runs(store.ended_before(now - retention, kBatch));
      });
      deleted += n;
      more = n == kBatch;
      if (!more) break;
    }
  } catch (const std::exception& e) {
    logger_.write(LogLevel::warn, "serve.runs_purge_failed",
                  "could not delete the runs past their retention; trying again later",
                  {{"error", e.what()}}, now);
  }
  if (deleted > 0) {
    logger_.write(LogLevel::info, "serve.runs_purged",
                  std::to_string(deleted) + " ended run(s) older than the retention deleted",
                  {{"deleted", deleted}, {"retention_ms", retention}}, now);
  }
  return std::chrono::milliseconds(more ? 0 : std::min<std::int64_t>(60'000, retention / 10 + 1));
}

void RuntimeCore::forget(std::string_view correlation_id) {
  const std::vector<std::string> cancelled = writer_.alone(
      [&](Store& store) { return store.forget(std::string(correlation_id), now_ms()); });
  logger_.write(LogLevel::info, "data.forgotten",
                "the data key of correlation id " + std::string(correlation_id) +
                    " was destroyed; its payloads read as forgotten",
                {{"correlation_id", correlation_id}, {"cancelled", cancelled}}, now_ms());
  notify_waiters();
}

std::vector<StepProgress> RuntimeCore::progress(std::string_view run_id) {
  std::lock_guard lock(store_mutex_);
  const std::string id(run_id);
  if (!store_->get_run(id, false)) throw no_such_run(run_id);
  return store_->progress_of(id);
}

}  // namespace durable::detail

namespace durable {

std::size_t Runtime::cancel(const RunFilter& filter, std::string reason) {
  return core_->bulk(detail::BulkAction::cancel, filter, reason);
}
std::size_t Runtime::retry(const RunFilter& filter) {
  return core_->bulk(detail::BulkAction::retry, filter, {});
}
std::size_t Runtime::purge(const RunFilter& filter) {
  return core_->bulk(detail::BulkAction::purge, filter, {});
}
std::size_t Runtime::count(const RunFilter& filter) const { return core_->count(filter); }

std::vector<StepProgress> Runtime::progress(std::string_view run_id) const {
  return core_->progress(run_id);
}

void Runtime::forget(std::string_view correlation_id) { core_->forget(correlation_id); }
void Runtime::pause(std::string_view run_id) { core_->pause(run_id); }
void Runtime::resume(std::string_view run_id) { core_->resume(run_id); }
std::size_t Runtime::pause_workflow(std::string_view workflow) {
  return core_->pause_workflow(workflow);
}
std::size_t Runtime::resume_workflow(std::string_view workflow) {
  return core_->resume_workflow(workflow);
}
std::vector<std::string> Runtime::paused_workflows() const { return core_->paused_workflows(); }

}  // namespace durable
