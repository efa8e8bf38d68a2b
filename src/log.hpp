// SPDX-License-Identifier: Apache-2.0
#pragma once
// Structured logs: one JSON object per line, at a level, to the runtime's sink.

#include <durable/options.hpp>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace durable::detail {

std::string_view to_string(LogLevel level);

class Logger {
 public:
  Logger(LogLevel level, std::function<void(std::string_view)> sink);

  bool enabled(LogLevel level) const { return level >= level_ && level_ != LogLevel::off; }
  /// Writes {"ts", "level", "event", "msg", ...fields} when the level is enabled. `fields` is a
  /// JSON object (run_id, correlation_id, workflow, step, ...); empty strings are left out.
  void write(LogLevel level, std::string_view event, std::string_view message, json fields,
             std::int64_t now_ms);

 private:
  LogLevel level_;
  std::function<void(std::string_view)> sink_;
  std::mutex mutex_;  // one line at a time on the default sink
};

}  // namespace durable::detail
