// SPDX-License-Identifier: Apache-2.0
// The durable command on a test's database, for the suite's files that run it (DURABLE_CLI is
// the command's path, which tests/CMakeLists.txt defines for durable_tests).
#pragma once

#include <string>
#include <utility>

#include "support.hpp"

namespace durable::test {

/// Runs `durable --db 'db' args`; its exit code and what it printed, standard error included.
inline std::pair<int, std::string> run_cli(const std::string& db, const std::string& args) {
  return run_shell(std::string(DURABLE_CLI) + " --db '" + db + "' " + args + " 2>&1");
}

}  // namespace durable::test
