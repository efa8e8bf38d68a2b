// SPDX-License-Identifier: Apache-2.0
// A mailbox per run: Runtime::send, step.receive, and the same send from a Client, over HTTP and
// from the durable command.

#include <doctest/doctest.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "admin.hpp"
#include "api.hpp"
#include "http_client.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;
using test::has;

namespace {

// Receives `n` messages on topic "t" (each waiting up to `timeout`), with a step between two
// receives; returns them in the order received, and "none" for one that did not come.
Workflow inbox(int n, std::chrono::milliseconds timeout = 1h) {
  return Workflow("inbox", [n, timeout](Step& step, const json&) -> json {
    json got = json::array();
    for (int i = 0; i < n; ++i) {
      got.push_back(step.receive("take", "t", timeout).value_or("none"));
      step.run("note", [] { return true; });
    }
    return got;
  });
}

// The receive entries of a run: what each got, in journal order.
std::vector<json> received(const Runtime& runtime, const std::string& id) {
  std::vector<json> got;
  for (const StepInfo& s : runtime.steps(id)) {
    if (s.kind == "receive")
      got.push_back(s.output.is_object() ? s.output.value("message", json()) : json());
  }
  return got;
}

}  // namespace

TEST_CASE("a message sent before the receive began is kept for it (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  runtime->add(inbox(1));
  const std::string id = runtime->start("inbox");
  runtime->send(id, "t", {{"approved", true}});  // the run has not begun
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::completed);
  CHECK(runtime->get(id).output == json::array({{{"approved", true}}}));
  const StepInfo take = runtime->steps(id).front();
  CHECK(take.kind == "receive");
  CHECK(take.output.at("topic") == "t");
}

TEST_CASE("messages are received in the order sent, each once, across replays (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  auto runtime = test::runtime_on(db, clock);
  runtime->add(inbox(4));
  const std::string id = runtime->start("inbox");
  for (int i = 1; i <= 3; ++i) runtime->send(id, "t", i);
  runtime->send(id, "other", "not for t");
  runtime->run_until_idle();  // every step a replay of the journal before it
  CHECK(runtime->get(id).status == Status::waiting);
  CHECK(received(*runtime, id) == std::vector<json>{1, 2, 3, nullptr});
  CHECK(runtime->steps(id).back().status == "waiting");

  runtime.reset();  // a restart: the journal, not the mailbox, says what was received
  runtime = test::runtime_on(db, clock);
  runtime->add(inbox(4));
  runtime->send(id, "t", 4);
  CHECK(runtime->get(id).status == Status::pending);  // the send woke the waiting receive
  runtime->run_until_idle();
  CHECK(runtime->get(id).output == json::array({1, 2, 3, 4}));
  const std::vector<StepInfo> steps = runtime->steps(id);
  std::vector<std::int64_t> seqs;
  for (const StepInfo& s : steps) {
    if (s.kind == "receive") seqs.push_back(s.output.at("seq").get<std::int64_t>());
  }
  REQUIRE(seqs.size() == 4);
  CHECK(std::is_sorted(seqs.begin(), seqs.end()));
  CHECK(std::set<std::int64_t>(seqs.begin(), seqs.end()).size() == 4);
}

TEST_CASE("a receive waits without a thread, and a send wakes it (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  runtime->add(inbox(1));
  const std::string id = runtime->start("inbox");
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::waiting);
  const StepInfo take = runtime->steps(id).back();
  CHECK(take.kind == "receive");
  CHECK(take.status == "waiting");
  CHECK(take.output == json{{"topic", "t"}});
  runtime->send(id, "u", "another topic");
  CHECK(runtime->get(id).status == Status::waiting);
  runtime->send(id, "t", "hello");
  CHECK(runtime->get(id).status == Status::pending);
  runtime->run_until_idle();
  CHECK(runtime->get(id).output == json::array({"hello"}));
}

TEST_CASE("a receive times out with nullopt, and a later message is kept (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  runtime->add(inbox(2, 1min));
  const std::string id = runtime->start("inbox");
  runtime->run_until_idle();
  CHECK(runtime->get(id).status == Status::waiting);
  clock.advance(2min);
  runtime->run_until_idle();  // the first receive timed out; the second waits
  CHECK(received(*runtime, id).front().is_null());
  runtime->send(id, "t", "late");
  runtime->run_until_idle();
  CHECK(runtime->get(id).output == json::array({"none", "late"}));
}

TEST_CASE("a zero timeout takes a message that is there, or returns nullopt") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  runtime->add(inbox(2, 0ms));
  const std::string id = runtime->start("inbox");
  runtime->send(id, "t", "there");
  runtime->run_until_idle();
  CHECK(runtime->get(id).output == json::array({"there", "none"}));
}

TEST_CASE("send refuses an unknown run, an ended run, a bad topic and a large message") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  runtime->add(inbox(0));
  const std::string id = runtime->start("inbox");
  CHECK_THROWS_AS(runtime->send("0123abcd", "t", 1), NotFound);
  CHECK_THROWS_AS(runtime->send("not utf-8 \xff", "t", 1), NotFound);
  CHECK_THROWS_WITH_AS(runtime->send(id, "", 1), doctest::Contains("is empty"), Error);
  CHECK_THROWS_WITH_AS(runtime->send(id, std::string(201, 'x'), 1),
                       doctest::Contains("201 bytes long; the limit is 200"), Error);
  CHECK_NOTHROW(runtime->send(id, std::string(200, 'x'), 1));
  CHECK_THROWS_WITH_AS(runtime->send(id, "a/b", 1), doctest::Contains("holds '/'"), Error);
  CHECK_THROWS_WITH_AS(runtime->send(id, "a\nb", 1), doctest::Contains("control character"), Error);
  CHECK_THROWS_WITH_AS(runtime->send(id, "bad \xff", 1), doctest::Contains("UTF-8"), Error);
  RuntimeOptions small = test::quiet(test::database(dir, "small"));
  small.max_output_bytes = 16;
  Runtime limited(small);
  limited.add(inbox(0));
  const std::string other = limited.start("inbox");
  CHECK_THROWS_WITH_AS(limited.send(other, "t", std::string(40, 'x')),
                       doctest::Contains("max_output_bytes"), Error);
  runtime->run_until_idle();
  REQUIRE(runtime->get(id).status == Status::completed);
  CHECK_THROWS_WITH_AS(runtime->send(id, "t", 1), doctest::Contains("has ended"), Error);
}

TEST_CASE("receive refuses a bad topic, a negative timeout, and a call from a step body") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  std::string topic;
  std::chrono::milliseconds timeout = 1s;
  runtime->add(Workflow("bad", [&](Step& step, const json&) -> json {
    return step.receive("take", topic, timeout).value_or("none");
  }));
  runtime->add(Workflow("nested", [](Step& step, const json&) -> json {
    return step.run("outer", [&step] { return step.receive("take", "t", 1s).value_or("none"); });
  }));
  const auto error_of = [&](const std::string& workflow) {
    const std::string id = runtime->start(workflow);
    runtime->run_until_idle();
    const RunInfo run = runtime->get(id);
    CHECK(run.status == Status::failed);
    return run.error ? run.error->message : std::string();
  };
  CHECK(has(error_of("bad"), "the topic of step.receive('take') is empty"));
  topic = "a/b";
  CHECK(has(error_of("bad"), "holds '/'"));
  topic = "t";
  timeout = -1ms;
  CHECK(has(error_of("bad"), "step.receive('take'): the timeout is negative"));
  CHECK(has(error_of("nested"), "step.receive"));
}

TEST_CASE(
    "concurrent senders: each message is received once, in its sender's order "
    "(on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  constexpr int kSenders = 4, kEach = 15;
  Runtime runtime(test::quiet(db));
  runtime.add(inbox(kSenders * kEach, 30s));
  const std::string id = runtime.start("inbox");
  {
    test::Serving serving(runtime);  // receives while the messages come
    std::vector<std::thread> senders;
    for (int s = 0; s < kSenders; ++s) {
      senders.emplace_back([&, s] {
        Client client(db);  // its own connection: sends race the run's commits
        for (int i = 0; i < kEach; ++i) client.send(id, "t", {{"from", s}, {"i", i}});
      });
    }
    for (std::thread& t : senders) t.join();
    CHECK(runtime.wait(id, 60s).status == Status::completed);
  }
  const json got = runtime.get(id).output;
  REQUIRE(got.size() == kSenders * kEach);
  std::map<int, int> next;  // per sender, the i expected next
  for (const json& m : got) {
    REQUIRE(m.is_object());
    const int from = m.at("from").get<int>();
    CHECK(m.at("i") == next[from]);
    ++next[from];
  }
  for (int s = 0; s < kSenders; ++s) CHECK(next[s] == kEach);
}

TEST_CASE("a Client sends to a run's mailbox (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  // Real time: the send comes from another connection, with its own clock.
  auto runtime = std::make_unique<Runtime>(test::quiet(db));
  runtime->add(inbox(1));
  const std::string id = runtime->start("inbox");
  runtime->run_until_idle();
  Client client(db);
  CHECK_THROWS_AS(client.send("0123abcd", "t", 1), NotFound);
  CHECK_THROWS_AS(client.send(id, "a/b", 1), Error);
  client.send(id, "t", "from a client");
  CHECK(client.get(id).status == Status::pending);
  runtime->run_until_idle();
  CHECK(client.get(id).output == json::array({"from a client"}));
  CHECK_THROWS_WITH_AS(client.send(id, "t", 1), doctest::Contains("has ended"), Error);
}

TEST_CASE("POST /v1/runs/{id}/messages/{topic} sends the body, behind the token (on each store)") {
  using test::http_client::Connection;
  using test::http_client::request_text;
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  // Real time: the send comes from another connection, with its own clock.
  auto runtime = std::make_unique<Runtime>(test::quiet(db));
  runtime->add(inbox(1));
  const std::string id = runtime->start("inbox");
  runtime->run_until_idle();
  ops::Admin admin(db);
  ops::HttpOptions options;
  options.port = 0;
  options.token = "sesame";
  ops::HttpServer server(options, ops::api_handler(admin));
  const auto post = [&](const std::string& target, const std::string& body,
                        const std::string& auth = "Authorization: Bearer sesame\r\n") {
    return Connection(server.port()).exchange(request_text("POST", target, body, auth));
  };
  const std::string messages = "/v1/runs/" + id + "/messages/";
  CHECK(post(messages + "t", "1", "").result_int() == 401);
  CHECK(post("/v1/runs/0123abcd/messages/t", "1").result_int() == 404);
  CHECK(post(messages + "a%2Fb", "1").result_int() == 400);
  CHECK(post(messages + "t", "").result_int() == 400);
  CHECK(post(messages + "t", "{not json").result_int() == 400);
  CHECK(Connection(server.port())
            .exchange(request_text("GET", messages + "t", "", "Authorization: Bearer sesame\r\n"))
            .result_int() == 405);
  CHECK(runtime->get(id).status == Status::waiting);  // nothing was sent
  const auto sent = post(messages + "t", R"({"approved":true})");
  CHECK(sent.result_int() == 202);
  const json answer = json::parse(sent.body());
  CHECK(answer.at("received") == true);
  CHECK(answer.at("topic") == "t");
  runtime->run_until_idle();
  CHECK(runtime->get(id).output == json::array({{{"approved", true}}}));
  CHECK(post(messages + "t", "2").result_int() == 409);
}

TEST_CASE("durable message sends to a run's mailbox, with exit codes for what it refuses") {
  test::TempDir dir;
  const std::string db = dir.file("db");
  // Real time: the send comes from another connection, with its own clock.
  auto runtime = std::make_unique<Runtime>(test::quiet(db));
  runtime->add(inbox(2));
  const std::string id = runtime->start("inbox");
  runtime->run_until_idle();
  const std::string cli = std::string(DURABLE_CLI) + " --db '" + db + "' ";
  const auto [code, out] = test::run_shell(cli + "message " + id + " t --data '{\"n\":1}'");
  CHECK(code == 0);
  CHECK(has(out, "its waiting receive took it"));
  CHECK(test::run_shell(cli + "message " + id + " t").first == 0);  // kept: {}
  CHECK(test::run_shell(cli + "message 0123abcd t 2>/dev/null").first == 3);
  CHECK(test::run_shell(cli + "message " + id + " 'a/b' 2>/dev/null").first == 2);
  CHECK(test::run_shell(cli + "message " + id + " t --data '{x' 2>/dev/null").first == 2);
  CHECK(test::run_shell(cli + "message " + id + " 2>/dev/null").first == 2);
  runtime->run_until_idle();
  CHECK(runtime->get(id).output == json::array({{{"n", 1}}, json::object()}));
  CHECK(test::run_shell(cli + "message " + id + " t 2>/dev/null").first == 4);  // ended
  const auto steps = test::run_shell(cli + "steps " + id).second;
  CHECK(has(steps, "receive"));
}

TEST_CASE("kill -9 between receives: each message is received once (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  const std::string log = dir.file("log");
  std::string id;
  {
    Client client(db);
    id = client.start("inbox", {{"n", 5}});
    for (int i = 0; i < 5; ++i) client.send(id, "t", i);
  }
  const std::string worker =
      std::string(DURABLE_MAILBOX_WORKER) + " '" + db + "' '" + log + "' " + id;
  // In the background, its pid printed: killed once it hangs in the step after message 2.
  const auto [started, pid] =
      test::run_shell("sh -c \"" + worker + " --hang-at 2 >/dev/null 2>&1 & echo \\$!\"");
  REQUIRE(started == 0);
  const auto logged = [&](const std::string& line) {
    std::ifstream in(log);
    int n = 0;
    for (std::string l; std::getline(in, l);) n += l == line;
    return n;
  };
  REQUIRE(test::eventually([&] { return logged("got 2") == 1; }, 30s));
  REQUIRE(::kill(std::stoi(pid), SIGKILL) == 0);
  const auto [code, out] = test::run_shell(worker + " 2>/dev/null");
  CHECK(code == 0);
  CHECK(has(out, "completed [0,1,2,3,4]"));
  for (const char* line : {"got 0", "got 1", "got 3", "got 4"}) CHECK(logged(line) == 1);
  CHECK(logged("got 2") == 2);  // the step body it died in ran again; the receive did not
  Client client(db);
  std::vector<json> got;
  for (const StepInfo& s : client.steps(id)) {
    if (s.kind == "receive") got.push_back(s.output.at("message"));
  }
  CHECK(got == std::vector<json>{0, 1, 2, 3, 4});
}

TEST_CASE(
    "messages no receive took go to the run continue_as_new starts, in order (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  auto runtime = test::runtime_on(test::database(dir, "db"), clock);
  // Each run of the line takes one message, then continues; the third returns what it took.
  runtime->add(Workflow("line", [](Step& step, const json& input) -> json {
    json got = input.value("got", json::array());
    got.push_back(step.receive("take", "t", 1h).value_or("none"));
    if (got.size() == 3) return got;
    step.continue_as_new({{"got", got}});
  }));
  const std::string first = runtime->start("line");
  for (int i = 1; i <= 3; ++i) runtime->send(first, "t", i);  // all before the run begins
  runtime->run_until_idle();
  const RunInfo one = runtime->get(first);
  REQUIRE(!one.continued_as.empty());
  const RunInfo two = runtime->get(one.continued_as);
  REQUIRE(!two.continued_as.empty());
  const RunInfo three = runtime->get(two.continued_as);
  CHECK(three.status == Status::completed);
  CHECK(three.output == json::array({1, 2, 3}));  // without the carry: the second run waits
}
