// SPDX-License-Identifier: Apache-2.0
// The engine's decisions, concern by concern (src/decision.hpp): what an invocation asks its host
// to run, write and wait for, and what it makes of how that came out. The recording host runs
// bodies one after another on this thread and keeps what it is asked to write, so a test reads
// the decisions in the order they were made, with no runtime, thread or database.

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "engine.hpp"

// In durable::detail rather than with a using-directive, which a unity build would carry into
// the files after this one.
namespace durable::detail {

namespace {

constexpr const char* kKinds[] = {"run_bodies", "write_transaction", "journal",
                                  "park",       "hand_over",         "linger",
                                  "write_nested", "write_stream",    "save_progress"};
static_assert(std::size(kKinds) == std::variant_size_v<Decision>);

struct RecordingHost final : Host {
  explicit RecordingHost(RunState& of) : run(of) {}

  Resolution carry_out(const Decision& decision) override {
    decided.emplace_back(kKinds[decision.index()]);
    return std::visit(
        Handlers{[this](const decide::RunBodies& d) {
                   batches.push_back(d.bodies.size());
                   run_in_turn(d.bodies, [this](const EntryWrite& w) {
                     ended.push_back(w.entry.key);
                     return true;
                   });
                   return Resolution{};
                 },
                 [this](const decide::WriteNested& d) {
                   nested.push_back(d.write.entry.key);
                   return Resolution{!refuse_nested};
                 },
                 [this](const decide::Journal& d) { return journal(d.entries); },
                 [this](const decide::Park& d) {
                   now = park_reaches.value_or(d.wake_ms);
                   return Resolution{true, now};
                 },
                 [this](const decide::WriteStream& d) {
                   streamed.push_back(d.stream + "=" + d.value.value_or("closed"));
                   return Resolution{};
                 },
                 [](const auto&) { return Resolution{}; }},
        decision);
  }

  // As the runtime does: the entries kept join the run's journal.
  Resolution journal(std::vector<EntryWrite>& entries) {
    for (const EntryWrite& w : entries) journaled.push_back(w.entry.key);
    if (refuse_journal) return Resolution{false};
    for (EntryWrite& w : entries) {
      if (w.is_new) {
        run.journal.append(std::move(w.entry));
      } else {
        run.journal.update(std::move(w.entry));
      }
    }
    entries.clear();
    return Resolution{};
  }

  std::int64_t now_ms() override { return now; }
  std::int64_t event_horizon() override { return 0; }
  void check_child(std::string_view, const json&) override {}

  RunState& run;
  std::vector<std::string> decided;     // the kinds, in order
  std::vector<std::size_t> batches;     // the bodies of each RunBodies
  std::vector<std::string> ended;       // entries journaled as their bodies ended
  std::vector<std::string> nested;      // nested entries written
  std::vector<std::string> journaled;   // entries a resident invocation journaled in place
  std::vector<std::string> streamed;    // stream writes from bodies
  bool refuse_nested = false, refuse_journal = false;
  std::int64_t now = 1000;
  std::optional<std::int64_t> park_reaches;  // where a park leaves the clock; unset: its wake
};

Outcome invoke(RunState& run, const Workflow& wf, RecordingHost& host, EngineConfig config = {}) {
  std::mt19937_64 random(1);
  return Invocation(run, wf, config, host.now, random, host).execute();
}

std::vector<std::string> keys(const std::vector<EntryWrite>& entries) {
  std::vector<std::string> out;
  for (const EntryWrite& w : entries) out.push_back(w.entry.key);
  return out;
}

// "a b c": a list as a failed check shows it.
std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : " ") + name;
  return out;
}

}  // namespace

TEST_CASE("decisions: a new step is run in a batch of one, its entry left for the outcome") {
  RunState run;
  RecordingHost host(run);
  Workflow wf("w", [](Step& step, const json&) -> json {
    return step.run("a", [] { return 1; }) + step.run("b", [] { return 2; });
  });
  const Outcome outcome = invoke(run, wf, host);
  CHECK(joined(host.decided) == "run_bodies");
  CHECK(host.batches == std::vector<std::size_t>{1});
  CHECK(host.ended.empty());
  CHECK(outcome.kind == Outcome::Kind::step_done);
  CHECK(joined(keys(outcome.entries)) == "a");
}

TEST_CASE("decisions: parallel bodies run in one batch, each journaled as it ends when asked") {
  RunState run;
  RecordingHost host(run);
  Workflow wf("w", [](Step& step, const json&) -> json {
    auto a = step.start("a", [] { return 1; });
    auto b = step.start("b", [] { return 2; });
    auto [x, y] = all(a, b);
    return x + y;
  });
  EngineConfig config;
  SUBCASE("as they end: written by the host, not in the outcome") {
    config.write_as_ended = true;
    const Outcome outcome = invoke(run, wf, host, config);
    CHECK(joined(host.decided) == "run_bodies");
    CHECK(host.batches == std::vector<std::size_t>{2});
    CHECK(joined(host.ended) == "a b");
    CHECK(outcome.kind == Outcome::Kind::step_done);
    CHECK(outcome.entries.empty());
    CHECK(run.journal.find("a") != nullptr);  // joined the journal once written
  }
  SUBCASE("with the outcome") {
    const Outcome outcome = invoke(run, wf, host, config);
    CHECK(host.batches == std::vector<std::size_t>{2});
    CHECK(host.ended.empty());
    CHECK(joined(keys(outcome.entries)) == "a b");
  }
}

TEST_CASE("decisions: a lone step is not journaled apart even when bodies are as they end") {
  RunState run;
  RecordingHost host(run);
  Workflow wf("w", [](Step& step, const json&) -> json { return step.run("a", [] { return 1; }); });
  EngineConfig config;
  config.write_as_ended = true;
  const Outcome outcome = invoke(run, wf, host, config);
  CHECK(host.ended.empty());
  CHECK(joined(keys(outcome.entries)) == "a");
}

TEST_CASE("decisions: a nested step is written from its body, and a refusal ends the run as lost") {
  RunState run;
  RecordingHost host(run);
  Workflow wf("w", [](Step& step, const json&) -> json {
    return step.run("a", [&] { return step.run("x", [] { return 1; }) + 1; });
  });
  SUBCASE("kept") {
    const Outcome outcome = invoke(run, wf, host);
    CHECK(joined(host.decided) == "run_bodies write_nested");
    CHECK(joined(host.nested) == "a/x");
    CHECK(joined(keys(outcome.entries)) == "a");
    CHECK(outcome.entries.front().entry.output == 2);
  }
  SUBCASE("refused") {
    host.refuse_nested = true;
    const Outcome outcome = invoke(run, wf, host);
    CHECK(joined(host.nested) == "a/x");
    CHECK(outcome.kind == Outcome::Kind::lost);
  }
}

TEST_CASE("decisions: a body's stream writes are carried out from its thread, before it goes on") {
  RunState run;
  RecordingHost host(run);
  Workflow wf("w", [](Step& step, const json&) -> json {
    return step.run("a", [&] {
      step.write_stream("s", 1);
      step.close_stream("s");
      return 0;
    });
  });
  invoke(run, wf, host);
  CHECK(joined(host.decided) == "run_bodies write_stream write_stream");
  CHECK(joined(host.streamed) == "s=1 s=closed");
}

TEST_CASE("decisions: a resident invocation journals in place and parks through a short sleep") {
  RunState run;
  RecordingHost host(run);
  Workflow wf("w", [](Step& step, const json&) -> json {
    const int a = step.run("a", [] { return 1; });
    step.sleep("nap", std::chrono::milliseconds(200));
    return a + step.run("b", [] { return 2; });
  });
  EngineConfig config;
  config.resident = true;
  SUBCASE("the clock gets there: one invocation to the end") {
    const Outcome outcome = invoke(run, wf, host, config);
    // The sleep is journaled as it begins and again, completed, once parked through; then b.
    CHECK(joined(host.decided) == "run_bodies journal journal park journal run_bodies journal");
    CHECK(joined(host.journaled) == "a nap nap b");
    CHECK(outcome.kind == Outcome::Kind::completed);
    CHECK(outcome.output == 3);
    CHECK(outcome.entries.empty());  // all journaled in place
  }
  SUBCASE("it does not: the run is evicted until the wake") {
    host.park_reaches = host.now;
    const Outcome outcome = invoke(run, wf, host, config);
    CHECK(joined(host.decided) == "run_bodies journal journal park");
    CHECK(outcome.kind == Outcome::Kind::sleep);
    CHECK(outcome.wake_at_ms == 1200);
    CHECK(outcome.reason.rfind("evicted until", 0) == 0);
  }
  SUBCASE("the journal is refused: the run was cancelled or taken over") {
    host.refuse_journal = true;
    const Outcome outcome = invoke(run, wf, host, config);
    CHECK(joined(host.decided) == "run_bodies journal");
    CHECK(outcome.kind == Outcome::Kind::lost);
  }
}

}  // namespace durable::detail
