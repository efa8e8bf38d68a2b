// SPDX-License-Identifier: Apache-2.0
// Run control on a Runtime: pausing and resuming runs and workflows, and failing the runs
// that pass their deadlines.

#include "run_requests.hpp"
#include "runtime_core.hpp"
#include "serialization.hpp"

namespace durable::detail {

void RuntimeCore::pause(std::string_view run_id) {
  std::optional<Status> before;
  {
    std::lock_guard lock(store_mutex_);
    before = store_->pause(std::string(run_id), now_ms());
  }
  if (!before) throw no_such_run(run_id);
  logger_.write(LogLevel::info, "run.pause",
                *before == Status::running ? "pause asked for: the run pauses at its next step"
                                           : "run paused",
                {{"run_id", std::string(run_id)}}, now_ms());
}

void RuntimeCore::resume(std::string_view run_id) {
  std::optional<Status> before;
  {
    std::lock_guard lock(store_mutex_);
    before = store_->resume(std::string(run_id), now_ms());
  }
  if (!before) throw no_such_run(run_id);
  logger_.write(LogLevel::info, "run.resumed", "run resumed", {{"run_id", std::string(run_id)}},
                now_ms());
  notify_waiters();
}

std::size_t RuntimeCore::pause_workflow(std::string_view workflow) {
  if (workflow.empty()) throw Error("pause_workflow needs a workflow name");
  check_utf8(workflow, "the workflow name");
  std::size_t paused = 0;
  {
    std::lock_guard lock(store_mutex_);
    paused = store_->pause_workflow(std::string(workflow), now_ms());
  }
  logger_.write(LogLevel::info, "workflow.paused",
                "workflow paused with " + std::to_string(paused) + " run(s)",
                {{"workflow", std::string(workflow)}}, now_ms());
  return paused;
}

std::size_t RuntimeCore::resume_workflow(std::string_view workflow) {
  if (workflow.empty()) throw Error("resume_workflow needs a workflow name");
  check_utf8(workflow, "the workflow name");
  std::size_t resumed = 0;
  {
    std::lock_guard lock(store_mutex_);
    resumed = store_->resume_workflow(std::string(workflow), now_ms());
  }
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
  return next_deadline_.get(now_ms(), options_.poll_interval,
                            [this] { return store_->next_deadline(); });
}

std::size_t RuntimeCore::expire_deadlines() {
  // In batches, so that a flood of runs past their deadline holds no write lock for long.
  constexpr std::size_t kBatch = 100;
  const std::int64_t now = now_ms();
  std::vector<std::string> failed;
  {
    std::lock_guard lock(store_mutex_);
    const std::optional<std::int64_t> next = next_deadline();
    if (!next || *next > now) return 0;  // the write transaction only when one is due
    failed = store_->expire(now, kBatch);
    forget_next_deadline();
  }
  counters_.runs_failed += failed.size();
  for (const std::string& id : failed) {
    logger_.write(LogLevel::warn, "run.deadline", "run failed: it passed its deadline",
                  {{"run_id", id}}, now);
  }
  if (!failed.empty()) notify_waiters();
  return failed.size();
}

}  // namespace durable::detail

namespace durable {

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
