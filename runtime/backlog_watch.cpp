// SPDX-License-Identifier: Apache-2.0
#include "backlog_watch.hpp"

#include "store.hpp"

namespace durable::detail {

void BacklogWatch::check() {
  // serve() calls this from its thread; a wait() or run_until_idle() on another thread while it
  // serves does too. One look at a time; the other skips.
  std::unique_lock guard(mutex_, std::try_to_lock);
  if (!guard.owns_lock()) return;
  const std::int64_t now = env_->now_ms();
  if (now < next_check_ms_) return;
  next_check_ms_ = now + options_.poll_interval.count();
  if (options_.backlog_warning == 0 && options_.backlog_age_breach.count() == 0) return;
  Backlog backlog;
  read_([&](ReadStore& store) { backlog = store.backlog(now); });
  const std::int64_t age = backlog.oldest_due_ms ? now - *backlog.oldest_due_ms : 0;
  const json fields = {{"pending", backlog.depth}, {"oldest_pending_age_ms", age}};
  if (options_.backlog_warning > 0) {
    signal(backlog.depth >= options_.backlog_warning, deep_, "workflow.backlog_warning",
           "workflow.backlog_cleared",
           std::to_string(backlog.depth) + " runs due and not claimed (threshold " +
               std::to_string(options_.backlog_warning) + ")",
           "pending depth back under the threshold", fields, now);
  }
  if (options_.backlog_age_breach.count() > 0) {
    signal(age >= options_.backlog_age_breach.count(), old_, "workflow.backlog_age_breach",
           "workflow.backlog_age_cleared",
           "the oldest due run has waited " + std::to_string(age) +
               " ms to be claimed (threshold " +
               std::to_string(options_.backlog_age_breach.count()) + " ms)",
           "the oldest due run's wait is back under the threshold", fields, now);
  }
}

void BacklogWatch::signal(bool raised, bool& was, const char* up, const char* down,
                          const std::string& said, const char* cleared, const json& fields,
                          std::int64_t now) {
  if (raised == was) return;
  logger_.write(raised ? LogLevel::warn : LogLevel::info, raised ? up : down,
                raised ? said : std::string(cleared), fields, now);
  was = raised;
}

}  // namespace durable::detail
