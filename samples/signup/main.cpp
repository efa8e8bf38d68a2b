// SPDX-License-Identifier: Apache-2.0
// The sign-up flow: create the account, add it to billing, sync the billing id back, wait a
// day, send the welcome email. Each invocation is printed, so the replay lifecycle is visible:
// the function runs from the top every time, and only the first step it has not done runs.
//
//   signup [--db FILE] [--email ADDRESS] [--delay DURATION] [--otlp-endpoint URL]
//
// --delay shortens the day-long wait ("2s" in scripts/demo). --otlp-endpoint sends the run's
// spans to an OpenTelemetry collector ("http://127.0.0.1:4318"; docs/tracing.md).

#include <durable/durable.hpp>
#include <iostream>
#include <string>

#include "signup.hpp"

int main(int argc, char** argv) {
  std::string db = "signup.db", email = "ada@example.com", delay = "1 day", otlp;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--db")
      db = argv[i + 1];
    else if (flag == "--email")
      email = argv[i + 1];
    else if (flag == "--delay")
      delay = argv[i + 1];
    else if (flag == "--otlp-endpoint")
      otlp = argv[i + 1];
    else {
      std::cerr << "unknown flag " << flag << "\nusage: signup [--db FILE] [--email ADDRESS] "
                << "[--delay DURATION] [--otlp-endpoint URL]\n";
      return 2;
    }
  }
  try {
    durable::Runtime runtime({.database = db, .otlp_endpoint = otlp});
    runtime.add(signup::workflow(delay));
    const std::string id =
        runtime.start("signup", signup::Request{email, "pro"}, {.idempotency_key = email});
    std::cout << "run " << id << " for " << email << " on " << db << "\n\n";
    const durable::RunInfo run = runtime.wait(id, std::chrono::hours(48));

    std::cout << "\nrun " << run.id << ": " << durable::to_string(run.status) << " after "
              << run.invocations << " invocations\noutput: " << run.output.dump()
              << "\n\njournal:\n";
    for (const auto& s : runtime.steps(id)) {
      std::cout << "  " << s.id << " (" << s.kind << ", " << s.status << ", " << s.attempts
                << " attempt" << (s.attempts == 1 ? "" : "s") << ")"
                << (s.output.is_null() ? "" : " = " + s.output.dump()) << "\n";
    }
    std::cout << "\nstate history:\n";
    for (const auto& t : run.history) {
      std::cout << "  " << durable::to_string(t.status) << ": " << t.reason << "\n";
    }
    return run.status == durable::Status::completed ? 0 : 1;
  } catch (const durable::Error& e) {
    std::cerr << "signup: " << e.what() << "\n";
    return 1;
  }
}
