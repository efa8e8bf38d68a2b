// SPDX-License-Identifier: Apache-2.0
#pragma once
// The backlog signals of a serving runtime (RuntimeOptions::backlog_warning and
// backlog_age_breach): runs due and not yet claimed, by count and by the age of the oldest,
// looked at once per poll_interval at most; each signal is logged when crossed and when cleared.

#include <cstdint>
#include <durable/options.hpp>
#include <memory>
#include <mutex>
#include <string>

#include "bulk.hpp"
#include "env.hpp"
#include "log.hpp"

namespace durable::detail {

class BacklogWatch {
 public:
  /// `read`, `logger`, `env` and `options` are the runtime's and outlive it.
  BacklogWatch(WithStore read, Logger& logger, const std::shared_ptr<Env>& env,
               const RuntimeOptions& options)
      : read_(std::move(read)), logger_(logger), env_(env), options_(options) {}

  /// Looks, unless it looked less than a poll interval ago or another thread looks now.
  void check();

 private:
  // Logs a signal that changed: `raised` now, `was` before.
  void signal(bool raised, bool& was, const char* up, const char* down, const std::string& said,
              const char* cleared, const json& fields, std::int64_t now);

  WithStore read_;
  Logger& logger_;
  const std::shared_ptr<Env>& env_;
  const RuntimeOptions& options_;
  std::mutex mutex_;  // guards the three below
  std::int64_t next_check_ms_ = 0;
  bool deep_ = false, old_ = false;  // signals raised and not yet cleared
};

}  // namespace durable::detail
