// SPDX-License-Identifier: Apache-2.0
#include "log.hpp"

#include "durations.hpp"
#include "errors_internal.hpp"
#include "serialization.hpp"

namespace durable::detail {

std::string_view to_string(LogLevel level) {
  switch (level) {
    case LogLevel::debug:
      return "debug";
    case LogLevel::info:
      return "info";
    case LogLevel::warn:
      return "warn";
    case LogLevel::error:
      return "error";
    case LogLevel::off:
      break;
  }
  return "off";
}

Logger::Logger(LogLevel level, std::function<void(std::string_view)> sink)
    : level_(level), sink_(std::move(sink)) {}

void Logger::write(LogLevel level, std::string_view event, std::string_view message, json fields,
                   std::int64_t now_ms) {
  if (!enabled(level)) return;
  json line = {
      {"ts", utc_text(now_ms)}, {"level", to_string(level)}, {"event", event}, {"msg", message}};
  if (const std::string_view id = error_id(message); !id.empty()) line["error_id"] = id;
  if (fields.is_object()) {
    for (auto& [key, value] : fields.items()) {
      if (value.is_string() && value.get_ref<const std::string&>().empty()) continue;
      line[key] = std::move(value);
    }
  }
  const std::string text = lenient_dump(line);
  std::lock_guard lock(mutex_);
  if (sink_) {
    sink_(text);
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
}

}  // namespace durable::detail
