// SPDX-License-Identifier: Apache-2.0
// Traces as a collector receives them (issue 18): the span tree of a run with a retry, a sleep
// across a restart, parallel steps and a child run; the trace context a caller passes in by
// StartOptions or by the traceparent header of POST /v1/runs and /v1/events; step.traceparent().

#include <doctest/doctest.h>

#include <atomic>
#include <durable/durable.hpp>
#include <iostream>
#include <map>
#include <set>

#include "admin.hpp"
#include "api.hpp"
#include "http_client.hpp"
#include "otlp_receiver.hpp"
#include "stores.hpp"
#include "support.hpp"
#include "trace_context.hpp"

using namespace durable;
using namespace std::chrono_literals;
namespace client = durable::test::http_client;
namespace trace = durable::detail::trace;

namespace {

constexpr const char* kCaller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
constexpr const char* kCallerTrace = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr const char* kCallerSpan = "00f067aa0ba902b7";

Workflow ship_flow() {
  return Workflow("ship", [](Step& step, const json&) -> json {
    return step.run("label", [] { return "L-1"; });
  });
}

// An order with a retried step, a sleep, two parallel steps, a child run and a step that passes
// its trace context on.
struct Order {
  std::atomic<int> reserve_calls{0};
  std::string body_context, workflow_context;

  Workflow flow() {
    return Workflow("order", [this](Step& step, const json&) -> json {
      step.run("reserve",
               [this] {
                 if (reserve_calls++ == 0) throw std::runtime_error("stock service down");
                 return 1;
               },
               {.retry = test::exact_policy(3, 5s)});
      step.sleep("cool-off", 1h);
      auto a = step.start("pack-a", [] { return 1; });
      auto b = step.start("pack-b", [] { return 2; });
      const auto packed = all(a, b);
      (void)packed;
      const json label = step.invoke("ship", "ship", json::object());
      workflow_context = step.traceparent();
      step.run("notify", [this, &step] {
        body_context = step.traceparent();
        return true;
      });
      return label;
    });
  }
};

std::map<std::string, std::vector<test::ReceivedSpan>> by_name(
    const std::vector<test::ReceivedSpan>& spans) {
  std::map<std::string, std::vector<test::ReceivedSpan>> out;
  for (const auto& s : spans) out[s.name].push_back(s);
  return out;
}

// The tree as indented lines, children in start order: what the note shows.
void print_tree(const std::vector<test::ReceivedSpan>& spans) {
  std::multimap<std::string, const test::ReceivedSpan*> children;
  std::set<std::string> ids;
  for (const auto& s : spans) ids.insert(s.span_id);
  for (const auto& s : spans) children.emplace(ids.contains(s.parent) ? s.parent : "", &s);
  std::int64_t t0 = INT64_MAX;
  for (const auto& s : spans) t0 = std::min(t0, s.start_ns);
  const auto print = [&](const auto& self, const std::string& parent, int depth) -> void {
    std::vector<const test::ReceivedSpan*> list;
    for (auto [it, end] = children.equal_range(parent); it != end; ++it) list.push_back(it->second);
    std::sort(list.begin(), list.end(), [](auto* x, auto* y) { return x->start_ns < y->start_ns; });
    for (const test::ReceivedSpan* s : list) {
      std::cout << std::string(2 * depth, ' ') << s->name << "  span " << s->span_id
                << (s->parent.empty() ? "" : " parent " + s->parent) << "  +"
                << (s->start_ns - t0) / 1'000'000 << " ms, "
                << (s->end_ns - s->start_ns) / 1'000'000 << " ms"
                << (s->status == 2 ? "  ERROR " + s->status_message : "")
                << (s->attributes.contains("durable.step.attempt")
                        ? "  attempt " + s->attribute("durable.step.attempt")
                        : "")
                << '\n';
      self(self, s->span_id, depth + 1);
    }
  };
  std::cout << "trace " << spans.front().trace_id << '\n';
  print(print, "", 1);
}

}  // namespace

TEST_CASE(
    "a run's span tree reaches the collector: a retry, a sleep across a restart, parallel "
    "steps and a child run, each span once (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  test::OtlpReceiver receiver;
  test::ManualClock clock;
  Order order;
  RuntimeOptions options;
  options.otlp_endpoint = receiver.url();
  std::string id;
  std::int64_t restart_ns = 0;
  {
    auto runtime = test::runtime_on(db, clock, options);
    runtime->add(order.flow());
    runtime->add(ship_flow());
    id = runtime->start("order", json::object(), {.traceparent = kCaller});
    runtime->run_until_idle();  // reserve fails once
    clock.advance(5s);
    runtime->run_until_idle();  // reserve succeeds; the run sleeps
    REQUIRE(runtime->get(id).status == Status::sleeping);
    restart_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(clock.now().time_since_epoch())
            .count();
  }                                     // closing sends what the first runtime queued
  CHECK(receiver.spans().size() == 2);  // the two attempts of reserve
  clock.advance(1h);
  {
    auto runtime = test::runtime_on(db, clock, options);
    runtime->add(order.flow());
    runtime->add(ship_flow());
    runtime->run_until_idle();
    REQUIRE(runtime->get(id).status == Status::completed);
  }
  const std::vector<test::ReceivedSpan> spans = receiver.spans();
  if (std::getenv("DURABLE_PRINT_TRACE") != nullptr) print_tree(spans);

  // Each span once, however often the run replayed (it did, once per step), and all in the
  // caller's trace.
  std::set<std::string> ids;
  for (const auto& s : spans) {
    CHECK(s.trace_id == kCallerTrace);
    CHECK(ids.insert(s.span_id).second);
  }
  auto named = by_name(spans);
  CHECK(spans.size() == 10);
  for (const char* name : {"run order", "sleep cool-off", "step pack-a", "step pack-b",
                           "invoke ship", "run ship", "step label", "step notify"}) {
    CAPTURE(std::string(name));
    CHECK(named[name].size() == 1);
  }
  REQUIRE(named["run order"].size() == 1);
  const test::ReceivedSpan& run = named["run order"][0];
  CHECK(run.parent == kCallerSpan);
  CHECK(run.span_id == trace::hex(trace::run_span(id)));
  CHECK(run.status == 1);
  CHECK(run.attribute("durable.run_id") == id);
  CHECK(run.attribute("durable.workflow") == "order");
  CHECK(run.attribute("durable.run.status") == "completed");
  CHECK(run.start_ns < restart_ns);
  CHECK(run.end_ns > restart_ns);

  // The retry: two attempts, the first an error with the step's message.
  REQUIRE(named["step reserve"].size() == 2);
  auto reserve = named["step reserve"];
  std::sort(reserve.begin(), reserve.end(),
            [](const auto& x, const auto& y) { return x.start_ns < y.start_ns; });
  CHECK(reserve[0].attribute("durable.step.attempt") == "1");
  CHECK(reserve[0].status == 2);
  CHECK(reserve[0].status_message.find("stock service down") != std::string::npos);
  CHECK(reserve[0].attribute("durable.step.status") == "retrying");
  CHECK(reserve[1].attribute("durable.step.attempt") == "2");
  CHECK(reserve[1].status == 1);
  CHECK(reserve[1].start_ns - reserve[0].start_ns >= 5'000'000'000);  // the backoff, on the clock
  for (const auto& s : reserve) CHECK(s.parent == run.span_id);

  // The sleep spans the restart, from where the run came to it to its end an hour on.
  REQUIRE(named["sleep cool-off"].size() == 1);
  const test::ReceivedSpan& sleep = named["sleep cool-off"][0];
  CHECK(sleep.parent == run.span_id);
  CHECK(sleep.start_ns <= restart_ns);
  CHECK(sleep.end_ns - sleep.start_ns >= 3'600'000'000'000);

  // The parallel steps under the run; the child run under the invoke step, its step under it.
  for (const char* name : {"step pack-a", "step pack-b", "invoke ship", "step notify"}) {
    REQUIRE(named[name].size() == 1);
    CHECK(named[name][0].parent == run.span_id);
  }
  const test::ReceivedSpan& invoke = named["invoke ship"][0];
  REQUIRE(named["run ship"].size() == 1);
  const test::ReceivedSpan& child = named["run ship"][0];
  CHECK(child.parent == invoke.span_id);
  CHECK(invoke.attribute("durable.child.run_id") == child.attribute("durable.run_id"));
  CHECK(child.attribute("durable.correlation_id") == run.attribute("durable.correlation_id"));
  REQUIRE(named["step label"].size() == 1);
  CHECK(named["step label"][0].parent == child.span_id);

  // step.traceparent(): the step's attempt inside its body, the run's span elsewhere.
  CHECK(order.body_context ==
        std::string("00-") + kCallerTrace + "-" + named["step notify"][0].span_id + "-01");
  CHECK(order.workflow_context == std::string("00-") + kCallerTrace + "-" + run.span_id + "-01");
}

TEST_CASE("a run started with no traceparent has a trace of its own, derived from its id") {
  test::TempDir dir;
  test::OtlpReceiver receiver;
  std::string id;
  {
    Runtime runtime({.database = dir.file("db"), .otlp_endpoint = receiver.url()});
    runtime.add(ship_flow());
    id = runtime.start("ship");
    runtime.run_until_idle();
  }
  const auto named = by_name(receiver.spans());
  REQUIRE(named.contains("run ship"));
  const test::ReceivedSpan& run = named.at("run ship").at(0);
  CHECK(run.trace_id == trace::hex(trace::trace_id_of_run(id)));
  CHECK(run.parent.empty());
  CHECK(named.at("step label").at(0).trace_id == run.trace_id);
}

TEST_CASE("a failed run's span says why, as its failed step's does") {
  test::TempDir dir;
  test::OtlpReceiver receiver;
  {
    Runtime runtime({.database = dir.file("db"), .otlp_endpoint = receiver.url()});
    runtime.add(Workflow("doomed", [](Step& step, const json&) -> json {
      return step.run("charge", []() -> int { throw NonRetryableError("card declined"); });
    }));
    runtime.start("doomed");
    runtime.run_until_idle();
  }
  const auto named = by_name(receiver.spans());
  REQUIRE(named.contains("run doomed"));
  const test::ReceivedSpan& run = named.at("run doomed").at(0);
  CHECK(run.status == 2);
  CHECK(run.status_message.find("card declined") != std::string::npos);
  CHECK(run.attribute("durable.run.status") == "failed");
  const test::ReceivedSpan& charge = named.at("step charge").at(0);
  CHECK(charge.status == 2);
  CHECK(charge.attribute("durable.step.status") == "failed");
}

TEST_CASE("a nested step's span is under the attempt of the body that called it") {
  test::TempDir dir;
  test::OtlpReceiver receiver;
  std::atomic<int> outer_calls{0};
  std::string inner_context;
  {
    Runtime runtime({.database = dir.file("db"), .otlp_endpoint = receiver.url()});
    runtime.add(Workflow("nest", [&](Step& step, const json&) -> json {
      return step.run("outer",
                      [&] {
                        const int got = step.run("inner", [&] {
                          inner_context = step.traceparent();
                          return 1;
                        });
                        if (outer_calls++ == 0) throw std::runtime_error("once more");
                        return got;
                      },
                      {.retry = test::exact_policy(2, 1ms)});
    }));
    const std::string id = runtime.start("nest");
    runtime.wait(id, 30s);
  }
  auto named = by_name(receiver.spans());
  REQUIRE(named["step outer"].size() == 2);
  REQUIRE(named["step inner"].size() == 1);  // journaled by the first attempt, kept by the second
  auto outer = named["step outer"];
  std::sort(outer.begin(), outer.end(),
            [](const auto& x, const auto& y) { return x.start_ns < y.start_ns; });
  const test::ReceivedSpan& inner = named["step inner"][0];
  CHECK(inner.parent == outer[0].span_id);
  CHECK(inner.attribute("durable.step.key") == "outer/inner");
  CHECK(inner_context.find("-" + inner.span_id + "-") != std::string::npos);
}

TEST_CASE("StartOptions::traceparent that is not a W3C traceparent is refused") {
  test::TempDir dir;
  Runtime runtime({.database = dir.file("db")});
  runtime.add(ship_flow());
  for (const char* bad : {"nonsense", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                          "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                          "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                          "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}) {
    CAPTURE(std::string(bad));
    CHECK_THROWS_WITH_AS(runtime.start("ship", json::object(), {.traceparent = bad}),
                         doctest::Contains("is not a W3C traceparent"), Error);
  }
  CHECK(runtime.list({}).empty());  // nothing half-made
}

TEST_CASE(
    "the traceparent header of POST /v1/runs and /v1/events joins the caller's trace, and one "
    "that cannot be read starts a trace of the run's own (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  test::OtlpReceiver receiver;
  std::string by_header, by_event, unreadable;
  {
    Runtime runtime({.database = db, .otlp_endpoint = receiver.url()});
    runtime.add(ship_flow());
    runtime.add(
        Workflow("on-paid",
                 [](Step& step, const json&) -> json { return step.run("book", [] { return 1; }); },
                 {.events = {"order.paid"}}));
    ops::Admin admin(db);
    ops::HttpServer server(client::ephemeral(), ops::api_handler(admin));
    client::Connection http(server.port());
    const auto post = [&](const std::string& target, const std::string& body,
                          const std::string& traceparent) {
      return http.exchange(client::request_text(
          "POST", target, body,
          "Content-Type: application/json\r\ntraceparent: " + traceparent + "\r\n"));
    };
    auto answer = post("/v1/runs", R"({"workflow":"ship"})", kCaller);
    REQUIRE(answer.result_int() == 201);
    by_header = client::json_of(answer).at("id");
    answer = post("/v1/runs", R"({"workflow":"ship"})", "00-not-a-trace-context");
    REQUIRE(answer.result_int() == 201);
    unreadable = client::json_of(answer).at("id");
    answer = post("/v1/events", R"({"name":"order.paid","data":{}})", kCaller);
    REQUIRE(answer.result_int() == 202);
    REQUIRE(client::json_of(answer).at("started").size() == 1);
    by_event = client::json_of(answer).at("started").at(0);
    runtime.run_until_idle();
  }
  std::map<std::string, test::ReceivedSpan> runs;  // run id: its run span
  for (const auto& s : receiver.spans()) {
    if (s.name.starts_with("run ")) runs[s.attribute("durable.run_id")] = s;
  }
  REQUIRE(runs.size() == 3);
  CHECK(runs[by_header].trace_id == kCallerTrace);
  CHECK(runs[by_header].parent == kCallerSpan);
  CHECK(runs[by_event].trace_id == kCallerTrace);
  CHECK(runs[by_event].parent == kCallerSpan);
  CHECK(runs[unreadable].trace_id == trace::hex(trace::trace_id_of_run(unreadable)));
  CHECK(runs[unreadable].parent.empty());
}

TEST_CASE("a runtime reports the spans it exported, and those it lost, in its counters") {
  test::TempDir dir;
  std::string gone;
  {
    test::OtlpReceiver closed;
    gone = closed.url();
  }
  test::OtlpReceiver receiver;
  for (const std::string& endpoint : {receiver.url(), gone}) {
    CAPTURE(endpoint);
    std::vector<std::string> lines;
    std::mutex mutex;
    RuntimeOptions options{.database = dir.file("db-" + std::to_string(endpoint.size()))};
    options.otlp_endpoint = endpoint;
    options.log_sink = [&](std::string_view line) {
      std::lock_guard lock(mutex);
      lines.emplace_back(line);
    };
    Runtime runtime(options);
    runtime.add(ship_flow());
    runtime.start("ship");
    runtime.run_until_idle();
    detail::RuntimeAccess::core(runtime).flush_spans();
    const Counters counters = runtime.counters();
    if (endpoint == gone) {
      CHECK(counters.spans_exported == 0);
      CHECK(counters.spans_dropped == 2);
      std::lock_guard lock(mutex);
      CHECK(std::count_if(lines.begin(), lines.end(), [](const std::string& line) {
              return line.find("\"trace.export_failed\"") != std::string::npos;
            }) == 1);
    } else {
      CHECK(counters.spans_exported == 2);
      CHECK(counters.spans_dropped == 0);
    }
  }
}

TEST_CASE("a run that joins a trace not sampled sends no span, nor do its children") {
  test::TempDir dir;
  test::OtlpReceiver receiver;
  {
    Runtime runtime({.database = dir.file("db"), .otlp_endpoint = receiver.url()});
    runtime.add(ship_flow());
    runtime.add(Workflow("parent", [](Step& step, const json&) -> json {
      return step.invoke("ship", "ship", json::object());
    }));
    const std::string id =
        runtime.start("parent", json::object(),
                      {.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"});
    runtime.start("ship");  // sampled: a trace of its own
    runtime.run_until_idle();
    CHECK(runtime.get(id).status == Status::completed);
  }
  const auto named = by_name(receiver.spans());
  CHECK(receiver.spans().size() == 2);  // the run of ship started alone, and its step
  CHECK(named.at("run ship").size() == 1);
  CHECK_FALSE(named.contains("run parent"));
}

TEST_CASE("a runtime closing with its collector gone reports the spans it lost before it goes") {
  test::TempDir dir;
  std::string gone;
  {
    test::OtlpReceiver closed;
    gone = closed.url();
  }
  auto lines = std::make_shared<std::vector<std::string>>();
  auto mutex = std::make_shared<std::mutex>();
  {
    RuntimeOptions options{.database = dir.file("db")};
    options.otlp_endpoint = gone;
    options.log_sink = [lines, mutex](std::string_view line) {
      std::lock_guard lock(*mutex);
      lines->emplace_back(line);
    };
    Runtime runtime(options);
    runtime.add(ship_flow());
    runtime.start("ship");
    runtime.run_until_idle();
  }  // the queued spans fail as it closes, and are logged while its logger still stands
  std::lock_guard lock(*mutex);
  CHECK(std::count_if(lines->begin(), lines->end(), [](const std::string& line) {
          return line.find("\"trace.export_failed\"") != std::string::npos;
        }) == 1);
}

TEST_CASE("RuntimeOptions::otlp_endpoint that is not an http URL is refused") {
  test::TempDir dir;
  CHECK_THROWS_WITH_AS(
      Runtime({.database = dir.file("db"), .otlp_endpoint = "collector:4318"}),
      doctest::Contains("the OTLP endpoint 'collector:4318' is not an http:// URL"), Error);
}
