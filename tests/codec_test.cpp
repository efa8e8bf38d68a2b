// SPDX-License-Identifier: Apache-2.0
// Payload codecs (RuntimeOptions::codec): every payload is stored encoded, with the codec's
// name; a payload stored under another codec, or none, is a clear Error naming both.

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <durable/testing.hpp>
#include <mutex>
#include <thread>

#include "payload_support.hpp"

using namespace durable;

namespace {

RuntimeOptions with_codec(const std::string& db, std::optional<Codec> codec) {
  RuntimeOptions opts = test::quiet(db);
  opts.codec = std::move(codec);
  return opts;
}

// Checks what the marker flow's run reads back: every payload decoded.
void check_marker_run(Runtime& runtime, const std::string& id) {
  const std::string m = test::kMarker;
  const RunInfo run = runtime.get(id);
  REQUIRE(run.status == Status::completed);
  CHECK(run.input == json{{"secret", m}});
  CHECK(run.output.at("out") == m);
  CHECK(run.output.at("result") == m + "-result");
  CHECK(run.output.at("event").at("note") == m + "-data");
  CHECK(run.output.at("child").at("child-output") == m + "-invoke");
  CHECK(run.output.at("message").at("note") == m + "-message");
  CHECK(runtime.published(id, "secret") == json(m + "-published"));
  const StreamRead stream = runtime.read_stream(id, "out");
  CHECK(stream.values == std::vector<json>{m + "-stream", m + "-token"});
  CHECK(stream.closed);
  bool saw_error = false;
  for (const StepInfo& s : runtime.steps(id)) {
    if (s.id == "fails") {
      REQUIRE(s.error);
      CHECK(s.error->message.find(m + "-error") != std::string::npos);
      saw_error = true;
    }
    if (s.id == "wait") CHECK(s.output.at("data").at("who") == m);
  }
  CHECK(saw_error);
}

}  // namespace

TEST_CASE("a codec encodes every payload: the marker is nowhere in the database (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "codec.db");
  {
    Runtime runtime(with_codec(db, test::xor_codec()));
    test::add_marker_flows(runtime);
    const std::string id = test::run_marker_flow(runtime);
    check_marker_run(runtime, id);
    runtime.schedule("marker", {{"secret", test::kMarker}},
                     {.id = "nightly", .every = std::chrono::hours(24)});
    CHECK(runtime.schedules().at(0).input.at("secret") == test::kMarker);
    CHECK_FALSE(test::database_holds(db, test::kMarker));
  }
  CHECK_FALSE(test::database_holds(db, test::kMarker));

  // The scan does find it where no codec is configured: the check above can fail.
  const std::string clear = test::database(dir, "clear.db");
  Runtime runtime(with_codec(clear, std::nullopt));
  test::add_marker_flows(runtime);
  check_marker_run(runtime, test::run_marker_flow(runtime));
  CHECK(test::database_holds(clear, test::kMarker));
}

TEST_CASE(
    "a payload stored under another codec, or none, is an Error naming both (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "codec.db");
  std::string id;
  {
    Runtime runtime(with_codec(db, test::xor_codec("xor")));
    test::add_marker_flows(runtime);
    id = test::run_marker_flow(runtime);
  }
  const auto message_of = [&](std::optional<Codec> codec) {
    Runtime runtime(with_codec(db, std::move(codec)));
    try {
      runtime.get(id);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string other = message_of(test::xor_codec("rot", 0x33));
  CHECK(other.find("'xor'") != std::string::npos);
  CHECK(other.find("'rot'") != std::string::npos);
  const std::string none = message_of(std::nullopt);
  CHECK(none.find("'xor'") != std::string::npos);
  CHECK(none.find("'none'") != std::string::npos);

  // And the other way: stored in the clear, read with a codec.
  const std::string clear = test::database(dir, "clear.db");
  {
    Runtime runtime(with_codec(clear, std::nullopt));
    test::add_marker_flows(runtime);
    id = test::run_marker_flow(runtime);
  }
  Runtime runtime(with_codec(clear, test::xor_codec("xor")));
  CHECK_THROWS_WITH_AS(runtime.get(id), doctest::Contains("stored under codec 'none'"), Error);
}

TEST_CASE("a codec's bad name, or one without both functions, is refused at construction") {
  test::TempDir dir;
  Codec bad = test::xor_codec("has space");
  CHECK_THROWS_WITH_AS(Runtime(with_codec(dir.file("a.db"), bad)),
                       doctest::Contains("codec name 'has space'"), Error);
  Codec half = test::xor_codec("half");
  half.decode = nullptr;
  CHECK_THROWS_WITH_AS(Runtime(with_codec(dir.file("b.db"), half)),
                       doctest::Contains("needs both encode and decode"), Error);
  CHECK_FALSE(std::filesystem::exists(dir.file("a.db")));  // nothing written
}

TEST_CASE("a codec's decode that throws is an Error naming the codec and the payload") {
  test::TempDir dir;
  const std::string db = dir.file("codec.db");
  std::string id;
  {
    Runtime runtime(with_codec(db, test::xor_codec()));
    test::add_marker_flows(runtime);
    id = test::run_marker_flow(runtime);
  }
  Codec broken = test::xor_codec();
  broken.decode = [](std::string_view, const PayloadContext&) -> std::string {
    throw std::runtime_error("the key service is down");
  };
  Runtime runtime(with_codec(db, broken));
  CHECK_THROWS_WITH_AS(runtime.get(id), doctest::Contains("the key service is down"), Error);
  CHECK_THROWS_WITH_AS(runtime.get(id), doctest::Contains("codec 'xor' failed to decode"), Error);
}

TEST_CASE("the codec sees the run id and correlation id of each payload") {
  test::TempDir dir;
  std::vector<std::string> seen;
  Codec spy = test::xor_codec();
  const auto encode = spy.encode;
  spy.encode = [&seen, encode](std::string_view text, const PayloadContext& ctx) {
    seen.push_back(std::string(ctx.run_id) + "/" + std::string(ctx.correlation_id));
    return encode(text, ctx);
  };
  Runtime runtime(with_codec(dir.file("codec.db"), spy));
  runtime.add(Workflow(
      "one", [](Step& step, const json&) -> json { return step.run("a", [] { return 1; }); }));
  const std::string id = runtime.start("one", {}, {.correlation_id = "order-9"});
  runtime.run_until_idle();
  REQUIRE(runtime.get(id).status == Status::completed);
  REQUIRE(seen.size() >= 3);  // input, step result, output
  for (const std::string& s : seen) CHECK(s == id + "/order-9");
}

TEST_CASE("TestRuntime and testing::replay take the codec") {
  test::TempDir dir;
  RuntimeOptions opts;
  opts.codec = test::xor_codec();
  const Workflow wf("twice", [](Step& step, const json& input) -> json {
    return step.run("double", [&] { return input.at("n").get<int>() * 2; });
  });
  testing::TestRuntime kit(opts);
  kit.add(wf);
  const testing::RunResult result = kit.run("twice", {{"n", 21}});
  CHECK(result.info.output == 42);
  const std::string file = dir.file("golden.db");
  kit.save(file);
  CHECK_NOTHROW(testing::replay(wf, file, result.info.id, opts));
  CHECK(testing::replay_all(wf, file, opts) == 1);
  CHECK_THROWS_WITH_AS(testing::replay(wf, file, result.info.id),
                       doctest::Contains("stored under codec 'xor'"), Error);
  CHECK_NOTHROW(testing::check_determinism(wf, {{"n", 1}}, opts));
}

TEST_CASE("a Client takes the codec: what it starts, the workers read (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "codec.db");
  Runtime runtime(with_codec(db, test::xor_codec()));
  runtime.add(Workflow("echo", [](Step&, const json& input) -> json { return input; }));
  Client client(db, test::xor_codec());
  const std::string id = client.start("echo", {{"secret", test::kMarker}});
  client.send_event("nobody.listens", {{"secret", test::kMarker}});
  runtime.run_until_idle();
  CHECK(client.get(id).output == json{{"secret", test::kMarker}});
  CHECK_FALSE(test::database_holds(db, test::kMarker));
  Client plain(db);
  CHECK_THROWS_WITH_AS(plain.get(id), doctest::Contains("stored under codec 'xor'"), Error);
}

TEST_CASE(
    "a run this runtime cannot decode is left to other workers, and its claims go on "
    "(on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "codec.db");
  Runtime writer(with_codec(db, test::xor_codec("xor")));
  const auto greet = [](Step& step, const json& input) -> json {
    return step.run("greet", [&] { return "hello " + input.at("who").get<std::string>(); });
  };
  writer.add(Workflow("greet", greet));
  const std::string theirs = writer.start("greet", {{"who", "xor"}});  // not executed yet

  std::mutex mutex;
  std::vector<std::string> lines;
  RuntimeOptions opts = with_codec(db, test::xor_codec("rot", 0x33));
  opts.log_level = LogLevel::error;  // quiet() has none
  opts.log_sink = [&](std::string_view line) {
    std::lock_guard lock(mutex);
    lines.emplace_back(line);
  };
  Runtime other(opts);
  other.add(Workflow("greet", greet));
  const std::string mine = other.start("greet", {{"who", "rot"}});
  other.run_until_idle();  // without the set-aside: throws, and runs nothing
  CHECK(other.get(mine).output == "hello rot");
  CHECK(writer.get(theirs).status == Status::pending);  // not failed, not written
  {
    std::lock_guard lock(mutex);
    const bool logged = std::any_of(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.find("run.undecodable") != std::string::npos &&
             l.find(theirs) != std::string::npos && l.find("'xor'") != std::string::npos;
    });
    CHECK(logged);
  }
  writer.run_until_idle();  // the runtime that wrote it runs it
  CHECK(writer.get(theirs).output == "hello xor");
}

TEST_CASE("with a codec, the history and the logs name an error's type, not its message") {
  test::TempDir dir;
  const std::string db = dir.file("codec.db");
  std::mutex mutex;
  std::vector<std::string> lines;
  RuntimeOptions opts = with_codec(db, test::xor_codec());
  opts.log_level = LogLevel::debug;
  opts.log_sink = [&](std::string_view line) {
    std::lock_guard lock(mutex);
    lines.emplace_back(line);
  };
  Runtime runtime(opts);
  test::add_marker_flows(runtime);
  test::run_marker_flow(runtime);
  std::vector<std::string> reasons;
  for (const RunInfo& run : runtime.list({.workflow = "marker-fails"})) {
    for (const Transition& change : runtime.get(run.id).history) reasons.push_back(change.reason);
  }
  const auto has = [&](const std::string& text) {
    return std::any_of(reasons.begin(), reasons.end(),
                       [&](const std::string& r) { return r.find(text) != std::string::npos; });
  };
  CHECK(has("attempt 1 of 2 failed (std::runtime_error, its message encoded)"));
  CHECK(has("the workflow threw std::runtime_error, its message encoded"));
  CHECK_FALSE(has(test::kMarker));
  std::lock_guard lock(mutex);
  CHECK(std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("\"run.failed\"") != std::string::npos &&
           l.find("std::runtime_error, its message encoded") != std::string::npos;
  }));
  for (const std::string& line : lines) CHECK(line.find(test::kMarker) == std::string::npos);
}

TEST_CASE(
    "without a codec, an error message that begins with '~' reads back as it was "
    "(on each store)") {
  test::TempDir dir;
  Runtime runtime(with_codec(test::database(dir, "clear.db"), std::nullopt));
  runtime.add(Workflow("home", [](Step& step, const json&) -> json {
    step.run("read", []() -> int { throw std::runtime_error("~/.config/app not found"); },
             {.retry = RetryPolicy{.max_attempts = 1}});
    return 0;
  }));
  const std::string id = runtime.start("home");
  runtime.run_until_idle();
  const RunInfo run = runtime.get(id);  // without the "encoded" mark: an unknown codec '(...)'
  REQUIRE(run.error);
  CHECK(test::has(run.error->message, "~/.config/app not found"));
  REQUIRE(runtime.steps(id).at(0).error);
  CHECK(runtime.steps(id).at(0).error->message == "~/.config/app not found");
}

TEST_CASE(
    "a dead worker's run that this runtime cannot decode is set aside, not claimed in a loop") {
  test::TempDir dir;
  const std::string db = dir.file("codec.db");
  {
    Runtime create(with_codec(db, test::xor_codec("xor")));  // the schema, before the fork
  }
  // A worker with codec "xor" claims a run and dies holding it.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    RuntimeOptions opts = with_codec(db, test::xor_codec("xor"));
    opts.lease = std::chrono::seconds(1);  // lapsed soon after the kill
    Runtime worker(opts);
    worker.add(Workflow("hold", [](Step& step, const json&) -> json {
      return step.run("block", [] {
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
        return 0;
      });
    }));
    worker.start("hold", {{"who", "xor"}});
    worker.run_until_idle();
    _exit(0);
  }
  Runtime writer(with_codec(db, test::xor_codec("xor")));
  writer.add(Workflow(
      "hold", [](Step& step, const json&) -> json { return step.run("block", [] { return 1; }); }));
  const auto held = [&] {
    const std::vector<RunInfo> runs = writer.list({.status = Status::running});
    return runs.empty() ? std::string() : runs.front().id;
  };
  REQUIRE(test::eventually([&] { return !held().empty(); }, std::chrono::seconds(20),
                           std::chrono::milliseconds(20)));
  const std::string id = held();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);

  Runtime other(with_codec(db, test::xor_codec("rot", 0x33)));
  other.add(Workflow("hold", [](Step&, const json&) -> json { return 2; }));
  const std::string mine = other.start("hold");
  other.run_until_idle();  // without the exclusion: the dead owner's run, again and again
  CHECK(other.get(mine).output == 2);
  CHECK(writer.get(id).status == Status::running);  // left as it was
  // A runtime that can decode it takes it over (once the dead worker's lease lapsed, at the
  // latest).
  CHECK(writer.wait(id, std::chrono::seconds(30)).output == 1);
}
