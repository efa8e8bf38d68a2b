// SPDX-License-Identifier: Apache-2.0
#pragma once
// How the durable command prints its answers for people: the admin layer's JSON as tables.

#include <cstddef>
#include <durable/durable.hpp>
#include <ostream>
#include <string>

namespace durable::ops {
class Admin;
}

namespace durable::detail::cli {

/// A value's JSON text on one line, cut to `limit` characters ("..." marking the cut).
std::string shown(const json& value, std::size_t limit = 120);
/// A field of an answer as text: a string as it is, another value as JSON, "-" when missing.
std::string text_of(const json& j, const char* key);

/// The answers of runs, steps (the list under "steps"), show, stats, schedules and verify.
void print_runs(std::ostream& out, const json& answer);
void print_steps(std::ostream& out, const json& steps);
void print_run(std::ostream& out, const json& run);
void print_stats(std::ostream& out, const json& stats);
void print_schedules(std::ostream& out, const json& answer);
void print_verify(std::ostream& out, const json& report);

/// `durable message` (cli_message.cpp): Admin::send, and its answer for people.
json send_message(ops::Admin& admin, const std::string& run_id, const std::string& topic,
                  const json& message);
void print_message(std::ostream& out, const json& sent);

}  // namespace durable::detail::cli
