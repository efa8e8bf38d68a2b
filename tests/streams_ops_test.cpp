// SPDX-License-Identifier: Apache-2.0
// Streams over the operators' ways in: GET /v1/runs/{id}/streams/{name} as Server-Sent Events
// (resumed by Last-Event-ID, kept alive by comments, ended at the close, idle readers holding no
// thread), GET /v1/runs/{id}/streams, and `durable tail RUN STREAM`.

#include <doctest/doctest.h>
#include <sys/resource.h>

#include <filesystem>
#include <memory>
#include <thread>

#include "admin.hpp"
#include "api.hpp"
#include "http_client.hpp"
#include "stores.hpp"
#include "cli_support.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;
namespace client = durable::test::http_client;

namespace {

constexpr const char* kAuth = "Authorization: Bearer t0ken\r\n";

// Writes the data of each event "more" ({"n": i, "last": bool}) to the stream "out", until
// one is the last: then closes it, and waits an hour for "end".
Workflow feed_workflow() {
  return Workflow("feed", [](Step& step, const json&) -> json {
    for (int i = 0;; ++i) {
      const json more =
          step.wait_for_event("more-" + std::to_string(i), "more", {.match = {{"n", i}}})
              .value_or(json());
      step.write_stream("out", more.value("value", json()));
      if (more.value("last", false)) break;
    }
    step.close_stream("out");
    step.wait_for_event("end", "end", {.timeout = 1h});
    return 0;
  });
}

void feed(Runtime& runtime, int n, json value, bool last = false) {
  runtime.send_event("more", {{"n", n}, {"value", std::move(value)}, {"last", last}});
  runtime.run_until_idle();
}

std::size_t entries_in(const char* dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

using test::run_cli;

}  // namespace

TEST_CASE(
    "http api: a stream is Server-Sent Events, one per value with its offset as id, resumed by "
    "Last-Event-ID, ended at the close, refusing bad input (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(test::quiet(db));
  runtime.add(feed_workflow());
  const std::string id = runtime.start("feed");
  runtime.run_until_idle();
  feed(runtime, 0, "zero");
  ops::Admin admin(db);
  ops::HttpOptions options = client::ephemeral();
  options.token = "t0ken";
  options.handler_threads = 1;  // a waiting reader must not hold it
  ops::HttpServer server(options, ops::api_handler(admin));
  const unsigned short port = server.port();
  const std::string path = "/v1/runs/" + id + "/streams/out";

  CHECK(client::Connection(port).exchange(client::get(path)).result_int() == 401);
  client::Connection nobody(port);
  CHECK(nobody.exchange(client::get("/v1/runs/nosuchrun/streams/out", kAuth)).result_int() == 404);
  for (const std::string& bad :
       {std::string("/v1/runs/") + id + "/streams/a%2Fb",
        std::string("/v1/runs/") + id + "/streams/a%0Ab", path + "?from=x"}) {
    client::Connection c(port);
    CHECK(c.exchange(client::get(bad, kAuth)).result_int() == 400);
  }
  client::Connection bad_resume(port);
  CHECK(bad_resume.exchange(client::get(path, std::string(kAuth) + "Last-Event-ID: two\r\n"))
            .result_int() == 400);

  // A reader sees what is there, then each value as it is written; others are served meanwhile.
  client::Connection reader(port);
  reader.send(client::get(path, kAuth));
  CHECK(reader.received_text("text/event-stream"));
  CHECK(reader.received_text("id: 0\ndata: \"zero\"\n\n"));
  client::Connection other(port);
  CHECK(other.exchange(client::get("/v1/stats", kAuth)).result_int() == 200);
  feed(runtime, 1, {{"one", 1}});
  CHECK(reader.received_text("id: 1\ndata: {\"one\":1}\n\n"));
  feed(runtime, 2, "two", true);                          // and the close
  const client::Response whole = reader.read_response();  // what is left: the response ends
  CHECK(whole.result_int() == 200);
  CHECK(client::header_of(whole, "Cache-Control") == "no-cache");

  // Resumed after offset 0, the whole stream is read at once and ends: it is closed.
  client::Connection resumed(port);
  const client::Response rest =
      resumed.exchange(client::get(path, std::string(kAuth) + "Last-Event-ID: 0\r\n"));
  CHECK(rest.body() == "id: 1\ndata: {\"one\":1}\n\nid: 2\ndata: \"two\"\n\n");
  client::Connection from_two(port);
  CHECK(from_two.exchange(client::get(path + "?from=2", kAuth)).body() ==
        "id: 2\ndata: \"two\"\n\n");

  // An HTTP/1.0 client knows no chunks: the body is the events as they are, ended by the close.
  client::Connection old_client(port);
  old_client.send("GET " + path + " HTTP/1.0\r\nHost: localhost\r\n" + kAuth + "\r\n");
  CHECK(old_client.received_text(
      "\r\n\r\nid: 0\ndata: \"zero\"\n\nid: 1\ndata: {\"one\":1}\n\nid: 2\ndata: \"two\"\n\n"));

  client::Connection lister(port);
  const json listed =
      client::json_of(lister.exchange(client::get("/v1/runs/" + id + "/streams", kAuth)));
  REQUIRE(listed.at("streams").size() == 1);
  CHECK(listed["streams"][0]["name"] == "out");
  CHECK(listed["streams"][0]["length"] == 3);
  CHECK(listed["streams"][0]["closed"] == true);
}

TEST_CASE("http api: an idle stream gets a comment line every keep-alive interval, 15 s by "
          "default (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(test::quiet(db));
  runtime.add(feed_workflow());
  const std::string id = runtime.start("feed");
  runtime.run_until_idle();
  ops::Admin admin(db);
  CHECK(admin.stream_keep_alive() == 15s);
  admin.set_stream_keep_alive(600ms);  // the default's 15 s, shortened: the same path
  ops::HttpServer server(client::ephemeral(), ops::api_handler(admin));
  client::Connection reader(server.port());
  reader.send(client::get("/v1/runs/" + id + "/streams/out"));
  CHECK(reader.received_text("text/event-stream"));
  const auto began = std::chrono::steady_clock::now();
  const auto comments = [&](std::size_t times) {
    bool kept = false;  // a read gives up after 5 s: read again until the comment comes
    while (!kept && client::since(began) < 10s) kept = reader.received_times(": keep-alive\n\n", times);
    return kept;
  };
  CHECK(comments(1));
  CHECK(client::since(began) >= 550ms);
  CHECK(comments(2));  // and again a keep-alive after the first
  CHECK(client::since(began) >= 1100ms);
}

TEST_CASE(
    "http api: 500 idle readers of one stream hold no more threads than one, and each gets the "
    "next value (on each store)") {
  rlimit files{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &files) == 0);
  if (files.rlim_cur < 4096 && files.rlim_max >= 4096) {
    files.rlim_cur = 4096;  // each reader is two sockets in this process
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &files) == 0);
  }
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(test::quiet(db));
  runtime.add(feed_workflow());
  const std::string id = runtime.start("feed");
  runtime.run_until_idle();
  feed(runtime, 0, "first");
  ops::Admin admin(db);
  ops::HttpOptions options = client::ephemeral();
  options.max_connections = 1000;
  ops::HttpServer server(options, ops::api_handler(admin));
  const std::string request = client::get("/v1/runs/" + id + "/streams/out");

  std::vector<std::unique_ptr<client::Connection>> readers;
  readers.push_back(std::make_unique<client::Connection>(server.port()));
  readers.back()->send(request);
  REQUIRE(readers.back()->received_text("id: 0\ndata: \"first\"\n\n"));
  std::this_thread::sleep_for(300ms);  // it waits now, and the change watch's thread runs
  const std::size_t threads_with_one = entries_in("/proc/self/task");
  const std::size_t files_with_one = entries_in("/proc/self/fd");
  for (int i = 1; i < 500; ++i) {
    readers.push_back(std::make_unique<client::Connection>(server.port()));
    readers.back()->send(request);
  }
  for (auto& r : readers) REQUIRE(r->received_text("id: 0\ndata: \"first\"\n\n"));
  std::this_thread::sleep_for(300ms);
  CHECK(entries_in("/proc/self/task") <= threads_with_one);
  // Two sockets a reader, and the few connections the handler threads lease for their reads: a
  // database connection held by each reader would add 500 or more.
  CHECK(entries_in("/proc/self/fd") <= files_with_one + 2 * 499 + 40);

  feed(runtime, 1, "hello");
  std::size_t woken = 0;
  for (auto& r : readers) woken += r->received_text("id: 1\ndata: \"hello\"\n\n") ? 1 : 0;
  CHECK(woken == 500);
}

TEST_CASE("cli: durable tail follows a stream until it closes (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(test::quiet(db));
  runtime.add(feed_workflow());
  const std::string id = runtime.start("feed");
  runtime.run_until_idle();
  feed(runtime, 0, "a");
  feed(runtime, 1, {{"b", 2}}, true);

  auto [code, out] = run_cli(db, "tail " + id + " out");
  CHECK(code == 0);
  CHECK(out == "\"a\"\n{\"b\":2}\n");
  std::tie(code, out) = run_cli(db, "--json tail " + id + " out --from 1");
  CHECK(code == 0);
  CHECK(json::parse(out) == json{{"offset", 1}, {"value", {{"b", 2}}}});
  std::tie(code, out) = run_cli(db, "tail nosuchrun out");
  CHECK(code == 3);
  std::tie(code, out) = run_cli(db, "tail " + id + " 'a/b'");
  CHECK(code == 2);
  CHECK(test::has(out, "contains '/'"));
  std::tie(code, out) = run_cli(db, "tail " + id + " out --from soon");
  CHECK(code == 2);
  CHECK(test::has(out, "--from must be a whole number"));

  // Following: a value written while it waits is printed, and the run's end ends it.
  const std::string second = runtime.start("feed");
  runtime.run_until_idle();
  feed(runtime, 0, "first");
  std::pair<int, std::string> followed;
  std::thread tail([&] { followed = run_cli(db, "tail " + second + " out"); });
  std::this_thread::sleep_for(500ms);
  runtime.cancel(second, "the test");
  tail.join();
  CHECK(followed.first == 0);
  CHECK(followed.second == "\"first\"\n");
}
