// SPDX-License-Identifier: Apache-2.0
#pragma once
// How the durable command prints its answers for people: the admin layer's JSON as tables.

#include <cstddef>
#include <durable/durable.hpp>
#include <ostream>
#include <string>

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

}  // namespace durable::detail::cli
