// SPDX-License-Identifier: Apache-2.0
// What serve() does on a clock besides running runs: failing the runs that pass their
// deadlines, and deleting the runs past their retention.

#include <algorithm>

#include "runtime_core.hpp"

namespace durable::detail {

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
  const std::vector<std::string> failed = writer_.alone([&](ControlStore& store) {
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
      const std::size_t n = writer_.alone([&](ControlStore& store) {  // the store let go between batches
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

}  // namespace durable::detail
