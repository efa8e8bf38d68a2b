// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The durable command inside the application's own binary.

#include <durable/runtime.hpp>

namespace durable {

/// Runs the `durable` command (docs/operations.md lists its commands) with the workflows the
/// application add()ed to `runtime` known: `verify` replays the database's unfinished runs
/// against them (exit code 5 when one would not replay: a CI step before a deploy), `start`
/// refuses a workflow the program does not have or an input it cannot take, `resolve` checks
/// the output against the step's call, and `serve` runs the program's workflows on the database
/// beside the HTTP API and dashboard (on `runtime`, or on a runtime made with its options and
/// workflows when `runtime` is on another database). `--db` defaults to
/// RuntimeOptions::database (verify refuses to go without it when that is ":memory:"). argv[0]
/// is the program's name, as main's; the command follows. Make the command's runtime on
/// ":memory:": a Runtime on a database file opens it for writing (migrating it, recording its
/// workflows), which a check before a deploy must not do to the live database, while verify
/// reads --db read-only:
///
///     int main(int argc, char** argv) {
///       if (argc > 1 && std::string_view(argv[1]) == "durable") {  // myapp durable verify --db F
///         durable::RuntimeOptions tools;
///         tools.database = ":memory:";
///         durable::Runtime runtime(tools);
///         runtime.add(checkout());
///         return durable::cli_main(argc - 1, argv + 1, runtime);
///       }
///       ...
///     }
///
/// Returns the command's exit code; prints to stdout and stderr. Call it before serve() or
/// run_until_idle() of the same runtime.
int cli_main(int argc, char** argv, Runtime& runtime);

namespace detail {
/// The command, with the application's workflows when `runtime` is set, and none (the
/// standalone `durable` binary) when it is null.
int cli_main(int argc, char** argv, Runtime* runtime);
}  // namespace detail

}  // namespace durable
