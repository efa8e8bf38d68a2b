// SPDX-License-Identifier: Apache-2.0
// Built-in encryption (RuntimeOptions::encryption_key_file) and Runtime::forget: AES-256-GCM
// under a data key per correlation id, wrapped by the key file's last key; rotation by adding a
// line; crypto-shredding that leaves the runs' history.

#include <doctest/doctest.h>

#include <fstream>
#include <thread>

#include "payload_support.hpp"

using namespace durable;

namespace {

constexpr const char* kKeyA = "a1:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
constexpr const char* kKeyB = "b2:ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

std::string key_file(const test::TempDir& dir, const std::string& name,
                     const std::vector<std::string>& lines) {
  const std::string path = dir.file(name);
  std::ofstream out(path);
  for (const std::string& line : lines) out << line << '\n';
  return path;
}

RuntimeOptions encrypted(const std::string& db, const std::string& keys) {
  RuntimeOptions opts = test::quiet(db);
  opts.encryption_key_file = keys;
  return opts;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("encryption: the marker is nowhere in the database, and reads back (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "enc.db");
  const std::string keys = key_file(dir, "keys", {kKeyA});
  Runtime runtime(encrypted(db, keys));
  test::add_marker_flows(runtime);
  const std::string id = test::run_marker_flow(runtime, "customer-1");
  const RunInfo run = runtime.get(id);
  REQUIRE(run.status == Status::completed);
  CHECK(run.output.at("out") == test::kMarker);
  CHECK(run.output.at("event").at("note") == std::string(test::kMarker) + "-data");
  for (const StepInfo& s : runtime.steps(id)) {
    if (s.id == "fails") CHECK(s.error->message.find(test::kMarker) != std::string::npos);
  }
  CHECK_FALSE(test::database_holds(db, test::kMarker));
  CHECK(test::query_text(db, "SELECT key_id FROM data_keys WHERE owner = 'customer-1'") == "a1");
}

TEST_CASE("encryption: a bad key file is a clear Error and nothing is written") {
  test::TempDir dir;
  const std::string db = dir.file("enc.db");
  const auto refused = [&](const std::string& keys) {
    const std::string message = error_of([&] { Runtime runtime(encrypted(db, keys)); });
    CHECK_FALSE(std::filesystem::exists(db));
    return message;
  };
  CHECK(refused(dir.file("missing")).find("cannot be read") != std::string::npos);
  CHECK(refused(key_file(dir, "empty", {})).find("holds no key") != std::string::npos);
  CHECK(refused(key_file(dir, "nocolon", {"a1"})).find("line 1 is not KEY_ID:64-hex-chars") !=
        std::string::npos);
  const std::string hex = std::string(kKeyA).substr(3);
  CHECK(refused(key_file(dir, "badhex", {"a1:" + hex.substr(0, 63) + "g"}))
            .find("not 64 hex characters") != std::string::npos);
  CHECK(
      refused(key_file(dir, "short", {"a1:" + hex.substr(0, 62)})).find("not 64 hex characters") !=
      std::string::npos);
  CHECK(refused(key_file(dir, "twice", {kKeyA, kKeyA})).find("line 2: key id 'a1' is twice") !=
        std::string::npos);
}

TEST_CASE(
    "encryption: rotation by adding a line, and a key id the file lost is named (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "enc.db");
  const auto flow = Workflow("echo", [](Step& step, const json& input) -> json {
    return step.run("echo", [&] { return input; });
  });
  std::string old_run;
  {
    Runtime runtime(encrypted(db, key_file(dir, "k1", {kKeyA})));
    runtime.add(flow);
    old_run = runtime.start("echo", {{"v", 1}}, {.correlation_id = "old"});
    runtime.run_until_idle();
  }
  std::string new_run;
  {
    Runtime runtime(encrypted(db, key_file(dir, "k2", {kKeyA, kKeyB})));
    runtime.add(flow);
    new_run = runtime.start("echo", {{"v", 2}}, {.correlation_id = "new"});
    runtime.run_until_idle();
    CHECK(runtime.get(old_run).output == json{{"v", 1}});  // old payloads still read
    CHECK(runtime.get(new_run).output == json{{"v", 2}});
  }
  CHECK(test::query_text(db, "SELECT key_id FROM data_keys WHERE owner = 'old'") == "a1");
  CHECK(test::query_text(db, "SELECT key_id FROM data_keys WHERE owner = 'new'") == "b2");
  Runtime runtime(encrypted(db, key_file(dir, "k3", {kKeyB})));
  CHECK(runtime.get(new_run).output == json{{"v", 2}});
  const std::string lost = error_of([&] { runtime.get(old_run); });
  CHECK(lost.find("key id 'a1'") != std::string::npos);
  CHECK(lost.find("does not hold") != std::string::npos);
}

TEST_CASE("encryption: a ciphertext copied into another row does not decrypt (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "enc.db");
  Runtime runtime(encrypted(db, key_file(dir, "keys", {kKeyA})));
  runtime.add(Workflow("echo", [](Step&, const json& input) -> json { return input; }));
  // One correlation id: one data key, so only the bound run id and slot tell the rows apart.
  const std::string a = runtime.start("echo", {{"who", "a"}}, {.correlation_id = "same"});
  const std::string b = runtime.start("echo", {{"who", "b"}}, {.correlation_id = "same"});
  runtime.run_until_idle();
  test::execute_sql(db, "UPDATE runs SET input = (SELECT input FROM runs WHERE id = '" + a +
                            "') WHERE id = '" + b + "'");
  CHECK(runtime.get(a).input == json{{"who", "a"}});
  const std::string moved = error_of([&] { runtime.get(b); });
  CHECK(moved.find("payload 'input' of " + b + " does not decrypt") != std::string::npos);
  // The output row into the input slot of the same run: the slot is bound too.
  test::execute_sql(db, "UPDATE runs SET input = output WHERE id = '" + a + "'");
  CHECK(error_of([&] { runtime.get(a); }).find("does not decrypt") != std::string::npos);
}

TEST_CASE(
    "forget: payloads read as forgotten, unfinished runs cancelled, history kept (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "enc.db");
  Runtime runtime(encrypted(db, key_file(dir, "keys", {kKeyA})));
  runtime.add(Workflow("wait", [](Step& step, const json& input) -> json {
    step.run("note", [&] { return input; });
    step.send_event("tell", "told", input);  // the event's data is u1's too
    return step.wait_for_event("go", "go", {}).has_value();
  }));
  runtime.add(Workflow("echo", [](Step& step, const json& input) -> json {
    return step.run("echo", [&] { return input; });
  }));
  const std::string done = runtime.start("echo", {{"m", test::kMarker}}, {.correlation_id = "u1"});
  const std::string waiting = runtime.start("wait", {{"m", 1}}, {.correlation_id = "u1"});
  const std::string other = runtime.start("echo", {{"m", 2}}, {.correlation_id = "u2"});
  runtime.run_until_idle();
  REQUIRE(runtime.get(done).status == Status::completed);
  REQUIRE(runtime.get(waiting).status == Status::waiting);
  const std::string wrapped =
      test::query_text(db, "SELECT wrapped FROM data_keys WHERE owner = 'u1'");
  REQUIRE(wrapped.size() > 40);
  const std::size_t history_before = runtime.get(done).history.size();

  runtime.forget("u1");

  const json forgotten = {{"$forgotten", true}};
  const RunInfo run = runtime.get(done);
  CHECK(run.status == Status::completed);
  CHECK(run.input == forgotten);
  CHECK(run.output == forgotten);
  CHECK(run.history.size() == history_before);
  const std::vector<StepInfo> steps = runtime.steps(done);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].id == "echo");
  CHECK(steps[0].status == "completed");
  CHECK(steps[0].output == forgotten);
  CHECK(runtime.get(waiting).status == Status::cancelled);
  CHECK(runtime.get(waiting).input == forgotten);
  CHECK(runtime.get(other).output == json{{"m", 2}});  // another correlation id: untouched
  CHECK(test::query_text(db, "SELECT count(*) FROM data_keys WHERE owner = 'u1'") == "0");
  // The event the run sent is encrypted under u1's key, not one of its own that would outlive it.
  CHECK(test::query_text(db, "SELECT correlation_id FROM events WHERE name = 'told'") == "u1");
  CHECK(test::query_text(db,
                         "SELECT count(*) FROM data_keys WHERE owner IN (SELECT 'event:' || id "
                         "FROM events WHERE name = 'told')") == "0");
  CHECK_FALSE(test::database_holds(db, wrapped));
  runtime.forget("u1");  // again: nothing left to destroy, no error

  // A forgotten run is not forked: the copy would hold the placeholders as values.
  CHECK_THROWS_WITH_AS(runtime.fork(done, "echo"), doctest::Contains("forgotten"), Error);
  // The correlation id used again gets a new data key; what was forgotten stays forgotten.
  const std::string again = runtime.start("echo", {{"m", 3}}, {.correlation_id = "u1"});
  runtime.run_until_idle();
  CHECK(runtime.get(again).output == json{{"m", 3}});
  CHECK(runtime.get(done).input == forgotten);  // not "does not decrypt"
  CHECK(runtime.steps(done).at(0).output == forgotten);
}

TEST_CASE("forget: the wrapped key's bytes are gone from the SQLite file and its WAL") {
  test::TempDir dir;
  const std::string db = dir.file("enc.db");
  std::string wrapped;
  {
    Runtime runtime(encrypted(db, key_file(dir, "keys", {kKeyA})));
    runtime.add(Workflow("echo", [](Step&, const json& input) -> json { return input; }));
    for (int i = 0; i < 20; ++i) {
      runtime.start("echo", {{"i", i}}, {.correlation_id = "c" + std::to_string(i)});
    }
    runtime.run_until_idle();
    wrapped = test::query_text(db, "SELECT wrapped FROM data_keys WHERE owner = 'c7'");
    REQUIRE(!wrapped.empty());
    // Copied into the file itself, not only the WAL: what secure_delete must overwrite.
    test::execute_sql(db, "PRAGMA wal_checkpoint(TRUNCATE)");
    REQUIRE(test::file_text(db).find(wrapped) != std::string::npos);
    runtime.forget("c7");
    CHECK(test::file_text(db).find(wrapped) == std::string::npos);
    CHECK(test::file_text(db + "-wal").find(wrapped) == std::string::npos);
  }
  CHECK(test::file_text(db).find(wrapped) == std::string::npos);
}

TEST_CASE("forget without an encryption key file is an Error") {
  test::TempDir dir;
  Runtime runtime(test::quiet(dir.file("plain.db")));
  CHECK_THROWS_WITH_AS(runtime.forget("u1"), doctest::Contains("encryption key file"), Error);
}

TEST_CASE("durable forget and --key-file: the command reads and forgets as the runtime does") {
  test::TempDir dir;
  const std::string db = dir.file("enc.db");
  const std::string keys = key_file(dir, "keys", {kKeyA});
  std::string id;
  {
    Runtime runtime(encrypted(db, keys));
    runtime.add(Workflow("echo", [](Step&, const json& input) -> json { return input; }));
    id = runtime.start("echo", {{"m", "hello"}}, {.correlation_id = "u9"});
    runtime.run_until_idle();
  }
  const std::string cli = std::string(DURABLE_CLI) + " --db '" + db + "' ";
  auto [code, out] = test::run_shell(cli + "--key-file '" + keys + "' --json show " + id + " 2>&1");
  CHECK(code == 0);
  CHECK(out.find("hello") != std::string::npos);
  std::tie(code, out) = test::run_shell(cli + "show " + id + " 2>&1");
  CHECK(code == 1);
  CHECK(out.find("stored under codec 'aes-256-gcm'") != std::string::npos);
  std::tie(code, out) = test::run_shell(cli + "forget u9 2>&1");
  CHECK(code == 2);
  CHECK(out.find("forget needs --key-file") != std::string::npos);
  std::tie(code, out) =
      test::run_shell(cli + "--key-file '" + dir.file("nope") + "' show " + id + " 2>&1");
  CHECK(code == 2);
  CHECK(out.find("--key-file: encryption key file") != std::string::npos);
  std::tie(code, out) = test::run_shell(cli + "--key-file '" + keys + "' forget u9 2>&1");
  CHECK(code == 0);
  CHECK(out.find("forgot correlation id u9") != std::string::npos);
  std::tie(code, out) =
      test::run_shell(cli + "--key-file '" + keys + "' --json show " + id + " 2>&1");
  CHECK(code == 0);
  CHECK(out.find("$forgotten") != std::string::npos);

  // An event sent from outside has a data key of its own, deleted with the event by a purge.
  {
    Runtime runtime(encrypted(db, keys));
    runtime.send_event("loose", {{"m", 1}});
    runtime.send_event("later", {{"m", 2}});  // the newest event is always kept
  }
  const std::string loose = test::query_text(db, "SELECT id FROM events WHERE name = 'loose'");
  const std::string count_key =
      "SELECT count(*) FROM data_keys WHERE owner = 'event:" + loose + "'";
  REQUIRE(test::query_text(db, count_key) == "1");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::tie(code, out) = test::run_shell(cli + "events purge --older-than 5ms 2>&1");
  CHECK(code == 0);
  CHECK(test::query_text(db, "SELECT count(*) FROM events WHERE name = 'loose'") == "0");
  CHECK(test::query_text(db, count_key) == "0");
}
