// SPDX-License-Identifier: Apache-2.0
// An application that embeds the durable command (durable::cli_main), for its tests: `cli_app
// RELEASE durable ARGS...` runs the command with that release of the order workflow added
// (order_releases.hpp).

#include <string>
#include <string_view>

#include "order_releases.hpp"

int main(int argc, char** argv) {
  if (argc < 3 || std::string_view(argv[2]) != "durable") return 2;
  durable::RuntimeOptions options;
  options.database = ":memory:";  // each command names its database with --db
  options.log_level = durable::LogLevel::off;
  durable::Runtime runtime(options);
  runtime.add(durable::test::order_release(std::stoi(argv[1])));
  return durable::cli_main(argc - 2, argv + 2, runtime);
}
