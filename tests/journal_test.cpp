// SPDX-License-Identifier: Apache-2.0
// The replay core with no disk, clock or threads: scripted journals in, decisions out.

#include "journal.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <ctime>
#include <random>

#include "durations.hpp"
#include "engine.hpp"

using namespace durable;
using namespace durable::detail;
using namespace std::chrono_literals;

namespace {
JournalEntry completed(std::string base, int n, json output) {
  JournalEntry e;
  e.key = journal_key(base, n);
  e.base = std::move(base);
  e.output = std::move(output);
  return e;
}
// Runs bodies one after another on the calling thread and keeps nested writes: no threads, no
// disk.
struct ScriptedHost final : Host {
  std::vector<EntryWrite> nested;
  Resolution carry_out(const Decision& decision) override {
    const auto keep = [this](const EntryWrite& write) {
      nested.push_back(write);
      return true;
    };
    return std::visit(
        Handlers{[&](const decide::RunBodies& run) {
                   run_in_turn(run.bodies, keep);
                   return Resolution{};
                 },
                 [&](const decide::WriteNested& write) { return Resolution{keep(write.write)}; },
                 [&](const decide::WriteTransaction& write) {
                   write_at_once(write.write, write.done, keep);
                   return Resolution{};
                 },
                 [](const decide::Journal&) {
                   return Resolution{false};  // every_step only
                 },
                 [](const decide::HandOver&) -> Resolution {
                   bug("a scripted test abandoned a step body");
                 },
                 [](const decide::Linger& linger) {
                   linger_polling(linger.done, detail::Env::system());
                   return Resolution{};
                 },
                 [](const auto&) { return Resolution{}; }},
        decision);
  }
  std::int64_t now_ms() override { return now; }
  std::int64_t event_horizon() override { return 0; }
  void check_child(std::string_view, const durable::json&) override {}
  std::string new_id() override { return "id-" + std::to_string(++ids); }
  std::int64_t now = 1000;
  int ids = 0;
};

Outcome invoke(RunState& run, const Workflow& wf, std::int64_t now_ms = 1000) {
  EngineConfig config;
  std::mt19937_64 random(1);
  ScriptedHost host;
  return Invocation(run, wf, config, now_ms, random, host).execute();
}

// Invokes `wf` on its journal until it stops taking steps; the entries each invocation wrote.
std::vector<std::vector<EntryWrite>> invoke_until_blocked(RunState& run, const Workflow& wf) {
  std::vector<std::vector<EntryWrite>> written;
  for (;;) {
    Outcome outcome = invoke(run, wf);
    written.push_back(outcome.entries);
    if (outcome.kind != Outcome::Kind::step_done) return written;
    for (EntryWrite& write : outcome.entries) run.journal.append(std::move(write.entry));
  }
}
}  // namespace

TEST_CASE("the cursor gives the same keys on and off the journal's order") {
  Journal journal;
  journal.append(completed("a", 1, 1));
  journal.append(completed("b", 1, 2));
  journal.append(completed("a", 2, 3));
  SUBCASE("in order") {
    ReplayCursor cursor(journal);
    CHECK(cursor.replaying());
    CHECK(cursor.next("a").entry->key == "a");
    CHECK(cursor.next("b").entry->key == "b");
    CHECK(cursor.next("a").entry->key == "a#2");
    CHECK_FALSE(cursor.replaying());
    const auto fresh = cursor.next("a");
    CHECK(fresh.entry == nullptr);
    CHECK(fresh.key == "a#3");
  }
  SUBCASE("out of order") {
    ReplayCursor cursor(journal);
    CHECK(cursor.next("a").entry->key == "a");
    const auto fresh = cursor.next("c");
    CHECK(fresh.entry == nullptr);
    CHECK(fresh.key == "c");
    CHECK_FALSE(cursor.replaying());  // past the journal once a call is new, b or not
    CHECK(cursor.next("a").entry->key == "a#2");
    CHECK(cursor.next("b").entry->key == "b");
  }
}

TEST_CASE("the engine returns journaled values and asks to run only the first new step") {
  RunState run;
  run.id = "r1";
  run.journal.append(completed("a", 1, 10));
  int bodies = 0;
  Workflow wf("w", [&](Step& step, const json&) -> json {
    const int a = step.run("a", [&] {
      ++bodies;
      return -1;
    });
    const int b = step.run("b", [&] {
      ++bodies;
      return a + 1;
    });
    step.run("c", [&] {
      ++bodies;
      return 0;
    });
    return b;
  });
  Outcome outcome = invoke(run, wf);
  CHECK(bodies == 1);
  CHECK(outcome.kind == Outcome::Kind::step_done);
  REQUIRE(outcome.entries.size() == 1);
  CHECK(outcome.entries[0].entry.key == "b");
  CHECK(outcome.entries[0].entry.output == 11);
  CHECK(outcome.entries[0].is_new);
}

TEST_CASE("the engine decides sleep, retry wait and completion from the journal") {
  RunState run;
  run.id = "r1";
  Workflow wf("w", [](Step& step, const json&) -> json {
    step.sleep("nap", 5s);
    return "done";
  });
  Outcome first = invoke(run, wf, 1000);
  CHECK(first.kind == Outcome::Kind::sleep);
  CHECK(first.wake_at_ms == 6000);
  run.journal.append(first.entries.at(0).entry);
  CHECK(invoke(run, wf, 5999).kind == Outcome::Kind::sleep);  // woken early: sleeps again
  Outcome done = invoke(run, wf, 6000);
  CHECK(done.kind == Outcome::Kind::completed);
  CHECK(done.output == "done");
}

TEST_CASE("text durations parse, and bad ones say what is wrong") {
  CHECK(parse_duration("30s") == 30s);
  CHECK(parse_duration("90 seconds") == 90s);
  CHECK(parse_duration("1 hour") == 1h);
  CHECK(parse_duration("2 hours") == 2h);
  CHECK(parse_duration("1 day") == 24h);
  CHECK(parse_duration("1h30m") == 90min);
  CHECK(parse_duration("1.5h") == 90min);
  CHECK(parse_duration("500ms") == 500ms);
  CHECK(parse_duration(" 2 Days 3 min ") == 48h + 3min);
  CHECK(parse_duration("1 week") == 168h);
  CHECK_THROWS_WITH_AS(parse_duration("soon"),
                       doctest::Contains("'soon' is not a duration (expected a number"), Error);
  CHECK_THROWS_WITH_AS(parse_duration("10 parsecs"), doctest::Contains("unknown unit 'parsecs'"),
                       Error);
  CHECK_THROWS_WITH_AS(parse_duration("10"), doctest::Contains("has no unit"), Error);
  CHECK_THROWS_WITH_AS(parse_duration(""), doctest::Contains("it is empty"), Error);
}

// std::stod threw std::out_of_range, not Error, for these: a step.sleep failed with an exception
// of the wrong type, and the HTTP API answered a start with such a deadline 500, not 400.
TEST_CASE("a duration whose number is past a double is refused as too long, not thrown") {
  CHECK_THROWS_WITH_AS(parse_duration("1" + std::string(400, '0') + "s"),
                       doctest::Contains("longer than 30,000 years"), Error);
  CHECK(parse_duration("0." + std::string(400, '0') + "1s") == 0ms);
}

TEST_CASE("a bad sleep string fails the run with the parser's message") {
  RunState run;
  run.id = "r1";
  Workflow wf("w", [](Step& step, const json&) -> json {
    step.sleep("nap", "a while");
    return nullptr;
  });
  const Outcome outcome = invoke(run, wf);
  CHECK(outcome.kind == Outcome::Kind::failed);
  REQUIRE(outcome.error);
  CHECK(outcome.error->message.find("[durable.invalid_argument] 'a while' is not a duration") == 0);
}

TEST_CASE("off the journal's order an id cannot spell another step's key") {
  Journal journal;
  journal.append(completed("a", 1, 1));
  journal.append(completed("a", 2, 2));
  ReplayCursor cursor(journal);
  CHECK(cursor.next("b").entry == nullptr);  // off track from here
  CHECK_THROWS_WITH_AS(cursor.next("a#2"), doctest::Contains("contains '#'"), Error);
}

TEST_CASE("replaying() turns false once a deploy removed a journaled step and a new one runs") {
  Journal journal;
  journal.append(completed("old", 1, 1));
  journal.append(completed("kept", 1, 2));
  ReplayCursor cursor(journal);
  CHECK(cursor.replaying());
  CHECK(cursor.next("kept").entry != nullptr);  // "old" is no longer called
  CHECK(cursor.replaying());
  CHECK(cursor.next("new").entry == nullptr);
  CHECK_FALSE(cursor.replaying());
}

TEST_CASE("NonDeterminism fails the run even when the workflow catches it") {
  RunState run;
  run.id = "r1";
  JournalEntry sleep;
  sleep.key = sleep.base = "wait";
  sleep.kind = StepKind::sleep;
  run.journal.append(sleep);
  Workflow wf("w", [](Step& step, const json&) -> json {
    try {
      step.run("wait", [] { return 1; });
    } catch (const std::exception&) {
      // a best-effort catch must not hide a divergence
    }
    return "done";
  });
  const Outcome outcome = invoke(run, wf);
  CHECK(outcome.kind == Outcome::Kind::failed);
  REQUIRE(outcome.error);
  CHECK(outcome.error->type == "durable::NonDeterminism");
}

TEST_CASE("a step result that JSON cannot hold fails the step at once with a clear message") {
  for (const json& bad : {json(std::nan("")), json{{"x", "caf\xe9"}}}) {
    RunState run;
    run.id = "r1";
    int bodies = 0;
    Workflow wf("w", [&](Step& step, const json&) -> json {
      step.run("compute", [&] {
        ++bodies;
        return bad;
      });
      return nullptr;
    });
    const Outcome outcome = invoke(run, wf);
    CHECK(bodies == 1);
    CHECK(outcome.kind == Outcome::Kind::failed);  // StepFailed was not caught
    REQUIRE(outcome.entries.size() == 1);
    const JournalEntry& entry = outcome.entries[0].entry;
    CHECK(entry.state == StepState::failed);
    CHECK(entry.error->type == "durable::NonRetryableError");
    CHECK(entry.error->message.find("returned a value that cannot be journaled") !=
          std::string::npos);
  }
}

TEST_CASE("sleep durations that cannot be a time are refused, not overflowed") {
  RunState run;
  run.id = "r1";
  Workflow wf("w", [](Step& step, const json&) -> json {
    step.sleep("forever", std::chrono::hours::max());
    return nullptr;
  });
  const Outcome outcome = invoke(run, wf);
  CHECK(outcome.kind == Outcome::Kind::failed);
  CHECK(outcome.error->message.find("not a usable duration") != std::string::npos);
  CHECK_THROWS_WITH_AS(parse_duration(".s"), doctest::Contains("'.' is not a number"), Error);
}

TEST_CASE(
    "a sent event and a child run get their ids from the host, so a scripted journal "
    "comes out the same each time") {
  Workflow wf("w", [](Step& step, const json&) -> json {
    step.send_event("tell", "order.placed", {{"order", 7}});
    return step.invoke("child", "charge", {{"amount", 3}});
  });
  const auto journal_of = [&] {
    RunState run;
    run.id = "r1";
    return invoke_until_blocked(run, wf);
  };
  const auto written = journal_of();
  REQUIRE(written.size() == 2);
  REQUIRE(written[0].size() == 1);
  CHECK(written[0][0].entry.output.at("id") == "id-1");
  REQUIRE(written[1].size() == 1);
  CHECK(written[1][0].entry.output.at("run") == "id-1");  // a new host: its first id again
  CHECK(written[1][0].entry.output.at("workflow") == "charge");
  const auto again = journal_of();
  REQUIRE(again.size() == written.size());
  for (std::size_t i = 0; i < written.size(); ++i) {
    CHECK(again[i][0].entry.output == written[i][0].entry.output);
  }
}

// utc_text writes the date from its own calendar arithmetic: it must agree with the C library's
// gmtime_r and strftime everywhere, including before 1970 and around leap days.
TEST_CASE("utc_text writes every time as gmtime_r and strftime do") {
  const auto by_libc = [](std::int64_t ms, bool with_ms) {
    const std::int64_t seconds = ms / 1000 - (ms % 1000 < 0 ? 1 : 0);
    const std::time_t t = static_cast<std::time_t>(seconds);
    std::tm utc{};
    gmtime_r(&t, &utc);
    char text[40];
    std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
    if (with_ms) n += std::snprintf(text + n, sizeof text - n, ".%03d", int(ms - seconds * 1000));
    return std::string(text, n) + "Z";
  };
  std::vector<std::int64_t> times = {0,
                                     -1,
                                     999,
                                     1000,
                                     951'782'400'000,         // 2000-02-29
                                     4'107'542'399'999,       // 2100-02-28T23:59:59.999
                                     -62'167'219'200'000,     // 0000-01-01
                                     253'402'300'799'999,     // 9999-12-31T23:59:59.999
                                     253'402'300'800'000,     // 10000-01-01
                                     -62'167'219'200'001,     // the year before 0000
                                     1'000'000'000'000'000};  // about 33,700: the longest sleep
  std::mt19937_64 random(11);
  std::uniform_int_distribution<std::int64_t> any(-62'167'219'200'000, 253'402'300'799'999);
  for (int i = 0; i < 20'000; ++i) times.push_back(any(random));
  for (const std::int64_t ms : times) {
    CAPTURE(ms);
    CHECK(utc_text(ms, true) == by_libc(ms, true));
    CHECK(utc_text(ms, false) == by_libc(ms, false));
  }
  CHECK(utc_text(951'782'400'123) == "2000-02-29T00:00:00.123Z");
}
