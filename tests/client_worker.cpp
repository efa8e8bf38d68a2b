// SPDX-License-Identifier: Apache-2.0
// A process that only enqueues and watches, for the multi-process tests of durable::Client: it
// links no workflow, starts N runs of "job" by name, waits for each and prints one line per run,
// "ID STATUS OUTPUT", then exits 0 when every run completed, 1 otherwise.
//
//   durable_client_worker DB N

#include <durable/durable.hpp>
#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: durable_client_worker DB N\n";
    return 2;
  }
  try {
    durable::Client client(argv[1]);
    std::vector<std::string> ids;
    for (int i = 0; i < std::stoi(argv[2]); ++i) ids.push_back(client.start("job", {{"i", i}}));
    bool all_completed = true;
    for (const std::string& id : ids) {
      const durable::RunInfo run = client.wait(id, std::chrono::seconds(60));
      all_completed = all_completed && run.status == durable::Status::completed;
      std::cout << run.id << ' ' << durable::to_string(run.status) << ' ' << run.output.dump()
                << std::endl;
    }
    return all_completed ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "durable_client_worker: " << e.what() << "\n";
    return 1;
  }
}
