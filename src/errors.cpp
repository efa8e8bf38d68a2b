// SPDX-License-Identifier: Apache-2.0
#include <cxxabi.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <durable/options.hpp>
#include <durable/workflow.hpp>
#include <memory>
#include <typeinfo>
#include <vector>

#include "errors_internal.hpp"

namespace durable {

namespace {
std::string step_failed_message(const ErrorInfo& info) {
  return "step '" + info.step_id + "' failed after " + std::to_string(info.attempts) +
         (info.attempts == 1 ? " attempt: " : " attempts: ") + info.type + ": " + info.message;
}
constexpr std::array<std::string_view, 8> kStatusNames = {
    "pending", "running", "sleeping", "waiting", "completed", "failed", "cancelled", "paused"};
}  // namespace

Error::Error(const std::string& what) : Error(errc::error, what, AsGiven{}) {}
Error::Error(const char* what) : Error(errc::error, std::string(what), AsGiven{}) {}
Error::Error(ErrorCode code, const std::string& what)
    : std::runtime_error(detail::with_id(code, what)), code_(code) {}
Error::Error(ErrorCode code, const std::string& what, AsGiven)
    : std::runtime_error(what), code_(code) {}

StepFailed::StepFailed(ErrorInfo error_info)
    : Error(errc::step_failed, step_failed_message(error_info)), info(std::move(error_info)) {}

std::string_view to_string(Status status) { return kStatusNames.at(static_cast<int>(status)); }

std::optional<Status> status_from_string(std::string_view text) {
  for (std::size_t i = 0; i < kStatusNames.size(); ++i) {
    if (kStatusNames[i] == text) return static_cast<Status>(i);
  }
  return std::nullopt;
}

namespace detail {

void check_no_input(const std::string& workflow, const json& input) {
  if (input.is_null() || (input.is_object() && input.empty())) return;
  std::string shown = input.dump(-1, ' ', false, json::error_handler_t::replace);
  if (shown.size() > 200) {
    std::size_t cut = 200;
    while (cut > 0 && (static_cast<unsigned char>(shown[cut]) & 0xC0) == 0x80) --cut;  // UTF-8
    shown = shown.substr(0, cut) + "...";
  }
  throw InvalidInput("workflow '" + workflow + "' takes no input (its function is fn(Step&)), " +
                     "but was given " + shown + ": start it with no input, null or {}");
}

void throw_bad_input(const std::string& workflow, std::string_view type,
                     const std::exception& error) {
  // nlohmann names a missing key in its message ("key 'email' not found"): say it first, in
  // the words of the input's reader.
  const std::string_view what = error.what();
  std::string field;
  if (const auto key = what.find("key '"); key != std::string_view::npos) {
    const auto end = what.find("' not found", key + 5);
    if (end != std::string_view::npos) {
      field = "the field '" + std::string(what.substr(key + 5, end - key - 5)) + "' is missing (";
    }
  }
  throw InvalidInput("the input of workflow '" + workflow + "' does not convert to " +
                     std::string(type) + ": " + (field.empty() ? "" : field) + std::string(what) +
                     (field.empty() ? "" : ")"));
}

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
}

ErrorInfo describe(std::exception_ptr error) {
  ErrorInfo info;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    info.type = demangle(typeid(e).name());
    info.message = e.what();
  } catch (...) {
    const std::type_info* type = abi::__cxa_current_exception_type();
    info.type = type != nullptr ? demangle(type->name()) : "unknown";
    info.message = "a non-standard exception of type " + info.type +
                   " was thrown (throw a std::exception to give it a message)";
  }
  return info;
}

std::string error_said(const ErrorInfo& error, bool with_message) {
  return with_message ? error.type + ": " + error.message : error.type + ", its message encoded";
}

std::string error_text(const std::optional<ErrorInfo>& error) {
  return error ? error->type + ": " + error->message : std::string("no error recorded");
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string human_bytes(std::size_t bytes) {
  char text[32];
  if (bytes < 1024) {
    std::snprintf(text, sizeof text, "%zu bytes", bytes);
  } else if (bytes < 1024 * 1024) {
    std::snprintf(text, sizeof text, "%.1f KiB", static_cast<double>(bytes) / 1024);
  } else {
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1024 * 1024));
  }
  return text;
}

namespace {
// The one way an id prefixes a message: "[durable.not_found] no run with id 'x'".
std::string prefix_of(std::string_view id) { return "[" + std::string(id) + "] "; }
}  // namespace

std::string with_id(ErrorCode code, std::string_view message) {
  return prefix_of(code.id()) + std::string(message);
}

std::string_view error_id(std::string_view message) {
  constexpr std::string_view kOpen = "[durable.";
  if (!message.starts_with(kOpen)) return {};
  const std::size_t end = message.find("] ");
  if (end == std::string_view::npos) return {};
  const std::string_view id = message.substr(1, end - 1);
  const bool word = std::all_of(id.begin() + kOpen.size() - 1, id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || c == '_' || c == '.';
  });
  return word && id.size() > kOpen.size() - 1 ? id : std::string_view();
}

std::string_view without_id(std::string_view message) {
  const std::string_view id = error_id(message);
  if (!id.empty()) message.remove_prefix(prefix_of(id).size());
  return message;
}

std::string_view message_of(const std::exception& error) {
  std::string_view what = error.what();
  if (const auto* coded = dynamic_cast<const Error*>(&error)) {
    const std::string prefix = prefix_of(coded->code());
    if (what.starts_with(prefix)) what.remove_prefix(prefix.size());
  }
  return what;
}

void bug(const std::string& what) {
  throw Error(
      errc::bug,
      "internal error in durable (a bug in durable, not in your code; please report it): " + what);
}

}  // namespace detail
}  // namespace durable
