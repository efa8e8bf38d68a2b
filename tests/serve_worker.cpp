// SPDX-License-Identifier: Apache-2.0
// A serving worker process for the multi-process tests: adds the workflows of
// worker_workflows.hpp and serves the database until SIGTERM or SIGINT, then exits 0.
//
//   durable_serve_worker DB LOG [QUARANTINE_AFTER [LEASE_MS]]

#include <iostream>

#include "worker_workflows.hpp"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 5) {
    std::cerr << "usage: durable_serve_worker DB LOG [QUARANTINE_AFTER [LEASE_MS]]\n";
    return 2;
  }
  try {
    durable::RuntimeOptions options({.database = argv[1],
                                     .poll_interval = std::chrono::milliseconds(20),
                                     .lease = std::chrono::milliseconds(5000),
                                     .log_level = durable::LogLevel::error});
    if (argc >= 4) options.quarantine_after = std::stoi(argv[3]);
    if (argc == 5) options.lease = std::chrono::milliseconds(std::stoll(argv[4]));
    durable::Runtime runtime(options);
    runtime.add(durable::test::job_workflow(argv[2]));
    runtime.add(durable::test::slow_workflow(argv[2]));
    runtime.add(durable::test::poison_workflow(argv[2]));
    runtime.add(durable::test::fanout_workflow(argv[2]));
    runtime.add(durable::test::transfers_workflow(argv[2]));
    runtime.serve();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "durable_serve_worker: " << e.what() << "\n";
    return 1;
  }
}
