// SPDX-License-Identifier: Apache-2.0
// A change shipped to a workflow while its runs are in flight. An order is charged, waits for
// the warehouse, ships, and gets a follow-up later. Release 1 ships by post. Release 2 ships by
// courier, under step.patched("courier"), and books the courier with an idempotency key from
// step.uuid, so a retried booking cannot book twice. Each release is a Runtime of its own on
// the same database file, as two builds of an application would be; the first is shut down
// while three orders are in flight:
//
// - "shipped": shipped by post on release 1 and sleeping in its follow-up. On release 2 its
//   journal goes on past the patch without the marker: it keeps the post path, and is not
//   shipped again.
// - "waiting": still waiting for the warehouse. It reaches the patch on release 2 with nothing
//   journaled past it, so it takes the new path and goes by courier.
// - "new": started on release 2, by courier.
//
// The program prints what each release did and checks it: exit 0 when every order shipped once,
// by the path its journal took, and 1 otherwise.
//
//   deploys [--db FILE]
//   deploys durable COMMAND...    the durable command, with release 2's workflows known
//
// Between the releases it runs the pre-deploy check (`deploys durable verify`) on release 2 as
// first drafted, without the patch, which it refuses, and on release 2 as shipped.
//
// --db defaults to a new file in the temporary directory, removed at the end; a given file must
// be new (the checks count what this process did).

#include <chrono>
#include <durable/durable.hpp>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using durable::json;

constexpr auto kWarehouse = 1s;     // from charge to shipping
constexpr auto kFollowUp = 1500ms;  // from shipping to the follow-up

// What the outside world saw: one line per effect, for the checks.
struct World {
  std::mutex mutex;
  std::map<std::string, std::vector<std::string>> effects;  // by order
  void did(const std::string& order, const std::string& what) {
    std::lock_guard lock(mutex);
    effects[order].push_back(what);
    std::cout << "  " << order << ": " << what << "\n";
  }
};

// Release 2 as first drafted (`with_patch` false) ships by courier without step.patched: the
// pre-deploy check refuses it, as it would strand the order already posted.
durable::Workflow order_workflow(int release, World& world, bool with_patch = true) {
  return durable::Workflow("order", [release, with_patch, &world](durable::Step& step,
                                                                  const json& input) {
    const std::string order = input.at("order");
    step.run("charge", [&] { world.did(order, "charged"); });
    step.sleep("warehouse", kWarehouse);
    std::string shipped;
    if (release >= 2 && (!with_patch || step.patched("courier"))) {
      const std::string key = step.uuid("booking-key");  // the same on every replay and retry
      step.run("book-courier", [&] { world.did(order, "courier booked (key " + key + ")"); });
      shipped = "courier";
    } else {
      step.run("post", [&] { world.did(order, "posted"); });
      shipped = "post";
    }
    step.sleep("follow-up", kFollowUp);
    step.run("follow-up-mail", [&] { world.did(order, "follow-up mailed"); });
    return json{{"shipped", shipped}};
  });
}

// Serves until `done` holds or the time runs out.
template <class Done>
bool serve_until(durable::Runtime& runtime, Done done, std::chrono::milliseconds limit) {
  std::thread server([&] { runtime.serve(); });
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(20ms);
  runtime.stop();
  server.join();
  return done();
}

durable::RuntimeOptions options(const std::string& db) {
  durable::RuntimeOptions opts;
  opts.database = db;
  opts.log_level = durable::LogLevel::off;
  return opts;
}

// The pre-deploy check of a build, as CI runs it: `deploys durable verify --db FILE`, the
// durable command embedded in this program (durable::cli_main) with that build's workflows.
// Returns its exit code: 0 when every unfinished run replays, 5 when one would not.
int verify_release(const std::string& db, World& world, bool with_patch) {
  durable::Runtime candidate(options(":memory:"));  // verify reads --db, read-only
  candidate.add(order_workflow(2, world, with_patch));
  std::vector<std::string> words = {"deploys", "verify", "--db", db};
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  std::cout << "$ deploys durable verify --db FILE    (release 2"
            << (with_patch ? "" : " drafted without the patch") << ")\n";
  const int code = durable::cli_main(static_cast<int>(argv.size()), argv.data(), candidate);
  std::cout << "exit " << code << "\n";
  return code;
}

int play(const std::string& db) {
  World world;
  std::map<std::string, std::string> runs;  // order -> run id
  const auto status = [&](durable::Runtime& runtime, const std::string& order) {
    return runtime.get(runs.at(order)).status;
  };

  std::cout << "release 1 (ships by post)\n";
  {
    durable::Runtime runtime(options(db));
    runtime.add(order_workflow(1, world));
    runs["shipped"] = runtime.start("order", {{"order", "shipped"}});
    const bool posted = serve_until(
        runtime, [&] { return world.effects.count("shipped") && world.effects["shipped"].size() == 2; },
        10s);
    runs["waiting"] = runtime.start("order", {{"order", "waiting"}});
    const bool charged = serve_until(
        runtime, [&] { return world.effects.count("waiting") > 0; }, 10s);
    if (!posted || !charged) {
      std::cerr << "deploys: release 1 did not get its orders that far\n";
      return 1;
    }
    std::cout << "release 1 shut down: 'shipped' is in its follow-up, 'waiting' at the warehouse\n";
  }
  if (verify_release(db, world, false) != 5 || verify_release(db, world, true) != 0) {
    std::cerr << "deploys: the pre-deploy check did not tell the two drafts of release 2 apart\n";
    return 1;
  }

  std::cout << "release 2 (ships by courier, under step.patched(\"courier\"))\n";
  durable::Runtime runtime(options(db));
  runtime.add(order_workflow(2, world));
  runs["new"] = runtime.start("order", {{"order", "new"}});
  const bool ended = serve_until(
      runtime,
      [&] {
        for (const auto& [order, id] : runs) {
          if (runtime.get(id).status != durable::Status::completed) return false;
        }
        return true;
      },
      20s);

  std::cout << "what each order did:\n";
  const std::map<std::string, std::string> expected_path = {
      {"shipped", "post"}, {"waiting", "courier"}, {"new", "courier"}};
  bool ok = ended;
  for (const auto& [order, path] : expected_path) {
    const durable::RunInfo run = runtime.get(runs.at(order));
    const std::vector<std::string>& seen = world.effects[order];
    const bool once = seen.size() == 3;  // charged, shipped once, follow-up
    const bool right = run.status == durable::Status::completed && run.output.value("shipped", "") == path;
    std::cout << "  " << order << ": " << durable::to_string(status(runtime, order)) << ", shipped by "
              << run.output.value("shipped", "?") << ", " << seen.size() << " effects"
              << (once && right ? "" : "  <-- wrong") << "\n";
    ok = ok && once && right;
  }
  std::cout << (ok ? "every order shipped once, by the path its journal took\n"
                   : "deploys: something went wrong (see above)\n");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "durable") {  // the command, with release 2's code
    World world;
    durable::Runtime runtime(options(":memory:"));
    runtime.add(order_workflow(2, world));
    return durable::cli_main(argc - 1, argv + 1, runtime);
  }
  std::string db;
  bool temporary = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--db" && i + 1 < argc) {
      db = argv[++i];
      temporary = false;
    } else {
      std::cerr << "usage: deploys [--db FILE]\n";
      return 2;
    }
  }
  if (temporary) {
    db = (std::filesystem::temp_directory_path() /
          ("durable-deploys-" + std::to_string(std::random_device{}()) + ".db"))
             .string();
  } else if (std::filesystem::exists(db)) {
    std::cerr << "deploys: " << db << " exists; give a new file (the checks count this run's work)\n";
    return 2;
  }
  int code = 1;
  try {
    code = play(db);
  } catch (const std::exception& e) {
    std::cerr << "deploys: " << e.what() << "\n";
  }
  if (temporary) {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db + suffix);
  }
  return code;
}
