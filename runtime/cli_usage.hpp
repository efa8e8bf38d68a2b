// SPDX-License-Identifier: Apache-2.0
#pragma once
// The durable command's usage: its text, the command line as parsed, and the check every command
// line passes before anything opens the database (runtime/cli_usage.cpp).

#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace durable::detail::cli {

/// What `durable help` prints.
extern const char* const kUsageText;

/// A command line that is wrong: exit 2, with the message.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The command line after the global flags: the command, its positional arguments, its flags.
struct Command {
  std::string name;
  std::vector<std::string> args;
  std::map<std::string, std::string> flags;

  std::string flag(const std::string& name_, std::string fallback = {}) const {
    const auto it = flags.find(name_);
    return it == flags.end() ? fallback : it->second;
  }
};

/// "; did you mean 'X'?" for the candidate nearest to `word`, when it is near enough to be a typo
/// (at most two edits, fewer than half the word's letters); otherwise empty.
std::string did_you_mean(std::string_view word, const std::vector<std::string_view>& candidates,
                         std::string_view prefix = "");
/// The words joined by ", ", each after `prefix`.
std::string joined(const std::vector<std::string_view>& words, std::string_view prefix = "");

/// Throws a UsageError naming the first thing wrong with the command line, whether or not a
/// database is there; the values of flags are checked where they are read, also before it.
void check_usage(const Command& cmd);

}  // namespace durable::detail::cli
