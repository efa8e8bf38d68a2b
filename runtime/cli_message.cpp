// SPDX-License-Identifier: Apache-2.0
// `durable message RUN TOPIC [--data JSON]`: a message to one run's mailbox (Runtime::send), as
// POST /v1/runs/{id}/messages/{topic} sends it.

#include <ostream>

#include "admin.hpp"
#include "cli_print.hpp"

namespace durable::detail::cli {

json send_message(ops::Admin& admin, const std::string& run_id, const std::string& topic,
                  const json& message) {
  return admin.send(run_id, topic, message);
}

void print_message(std::ostream& out, const json& sent) {
  out << "sent a message on '" << text_of(sent, "topic") << "' to run " << text_of(sent, "run_id")
      << (sent.value("received", false) ? ": its waiting receive took it\n"
                                        : ": kept until the run receives it\n");
}

}  // namespace durable::detail::cli
