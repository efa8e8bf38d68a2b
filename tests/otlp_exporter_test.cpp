// SPDX-License-Identifier: Apache-2.0
// The OTLP exporter against a real receiver: batches, the request's form, a collector that
// refuses or hangs, a full queue, closing, and endpoints it refuses.

#include "otlp_exporter.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <durable/errors.hpp>
#include <set>
#include <thread>

#include "otlp_receiver.hpp"

using namespace durable;
using namespace std::chrono_literals;
namespace otlp = durable::ops::otlp;
namespace trace = durable::detail::trace;

namespace {

otlp::Span span_number(int i) {
  otlp::Span span;
  span.trace_id = trace::trace_id_of_run("run-" + std::to_string(i % 3));
  span.span_id = trace::step_span("run", "step", i + 1);
  span.name = "step " + std::to_string(i);
  span.start_unix_ns = 1'700'000'000'000'000'000 + i;
  span.end_unix_ns = span.start_unix_ns + 5;
  span.attributes = {{"n", i}};
  return span;
}

otlp::ExporterOptions to(const test::OtlpReceiver& receiver) {
  otlp::ExporterOptions options;
  options.endpoint = receiver.url();
  options.service_name = "exporter-test";
  options.service_version = "1.2.3";
  options.interval = 50ms;
  return options;
}

}  // namespace

TEST_CASE("the exporter sends spans in batches of at most max_batch to <endpoint>/v1/traces") {
  test::OtlpReceiver receiver;
  otlp::ExporterOptions options = to(receiver);
  options.max_batch = 100;
  otlp::Exporter exporter(options);
  CHECK(exporter.url() == receiver.url() + "/v1/traces");
  for (int i = 0; i < 250; ++i) exporter.add(span_number(i));
  exporter.flush();
  const auto spans = receiver.spans();
  REQUIRE(spans.size() == 250);
  CHECK(receiver.requests() >= 3);
  for (const nlohmann::json& body : receiver.bodies()) {
    CHECK(body.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").size() <= 100);
  }
  std::set<std::string> names;
  for (const auto& s : spans) names.insert(s.name);
  CHECK(names.size() == 250);
  CHECK(spans[0].resource.at("service.name") == "exporter-test");
  CHECK(spans[0].resource.at("service.version") == "1.2.3");
  CHECK(spans[0].attributes.at("n").is_number_integer());
  const otlp::ExportStats stats = exporter.stats();
  CHECK(stats.sent == 250);
  CHECK(stats.dropped == 0);
  CHECK(stats.failed == 0);
}

TEST_CASE("the exporter sends a partial batch once its interval has passed") {
  test::OtlpReceiver receiver;
  otlp::Exporter exporter(to(receiver));
  exporter.add(span_number(1));
  CHECK(receiver.wait_requests(1, 5s));  // no flush: the 50 ms interval sends it
  CHECK(receiver.spans().size() == 1);
}

TEST_CASE("a collector that refuses a batch loses its spans, counted and reported") {
  test::OtlpReceiver receiver;
  receiver.answer(503);
  otlp::ExporterOptions options = to(receiver);
  std::mutex mutex;
  std::vector<std::string> reports;
  options.on_error = [&](const std::string& message) {
    std::lock_guard lock(mutex);
    reports.push_back(message);
  };
  otlp::Exporter exporter(options);
  for (int i = 0; i < 10; ++i) exporter.add(span_number(i));
  exporter.flush();
  CHECK(exporter.stats().failed == 10);
  CHECK(exporter.stats().sent == 0);
  {
    std::lock_guard lock(mutex);
    REQUIRE(reports.size() == 1);
    CHECK(reports[0].find("answered 503") != std::string::npos);
    CHECK(reports[0].find("refused by the test") != std::string::npos);
  }
  receiver.answer(200);  // the collector is back: the next batch goes
  exporter.add(span_number(11));
  exporter.flush();
  CHECK(exporter.stats().sent == 1);
}

TEST_CASE("with no collector listening, spans are lost, counted, and nothing waits for it") {
  // A port nothing listens on: a server's, closed.
  std::string url;
  {
    test::OtlpReceiver gone;
    url = gone.url();
  }
  otlp::ExporterOptions options;
  options.endpoint = url;
  options.interval = 10ms;
  std::atomic<int> reports{0};
  options.on_error = [&](const std::string& message) {
    CHECK(message.find("cannot connect") != std::string::npos);
    ++reports;
  };
  otlp::Exporter exporter(options);
  for (int i = 0; i < 5; ++i) exporter.add(span_number(i));
  exporter.flush();
  CHECK(exporter.stats().failed == 5);
  CHECK(reports == 1);  // once a minute at most
}

TEST_CASE("a hung collector neither blocks add() nor grows the queue past max_queue") {
  test::OtlpReceiver receiver;
  receiver.hold(true);
  otlp::ExporterOptions options = to(receiver);
  options.max_queue = 20;
  options.max_batch = 5;
  options.timeout = 2s;
  otlp::Exporter exporter(options);
  exporter.add(span_number(0));
  REQUIRE(receiver.wait_requests(1, 5s));  // the exporter's thread is stuck in a request now
  // Each add() returns at once although nothing is sent: a step never waits for the collector.
  for (int i = 1; i <= 100; ++i) exporter.add(span_number(i));
  CHECK(exporter.stats().dropped == 80);
  receiver.hold(false);
  exporter.flush();
  const otlp::ExportStats stats = exporter.stats();
  // The held request timed out (failed), and the 20 queued went once the collector answered.
  CHECK(stats.sent + stats.failed == 21);
  CHECK(stats.sent >= 20);
}

TEST_CASE("closing the exporter sends what is queued") {
  test::OtlpReceiver receiver;
  {
    otlp::ExporterOptions options = to(receiver);
    options.interval = 1h;  // only closing sends
    otlp::Exporter exporter(options);
    for (int i = 0; i < 7; ++i) exporter.add(span_number(i));
  }
  CHECK(receiver.spans().size() == 7);
}

TEST_CASE("closing the exporter with its collector hung gives up at the first failed batch") {
  test::OtlpReceiver receiver;
  receiver.hold(true);
  otlp::ExporterOptions options = to(receiver);
  options.interval = 1h;
  options.timeout = 2s;
  options.max_batch = 100;
  {
    otlp::Exporter exporter(options);
    for (int i = 0; i < 100; ++i) exporter.add(span_number(i));
    REQUIRE(receiver.wait_requests(1, 5s));                       // a full batch went, and hangs
    for (int i = 0; i < 1000; ++i) exporter.add(span_number(i));  // ten more batches queued
  }
  // Closing waited for the batch under way to time out; the ten others were dropped with it.
  CHECK(receiver.requests() == 1);
  receiver.hold(false);
}

TEST_CASE("an OTLP endpoint that is not an http URL with a host and port is refused") {
  for (const char* endpoint : {"localhost:4318", "https://collector:4318", "ftp://x", "http://",
                               "http://:4318", "http://host:0", "http://host:65536",
                               "http://host:http", "http://host:4318/x?y=1", "http://[::1"}) {
    CAPTURE(std::string(endpoint));
    otlp::ExporterOptions options;
    options.endpoint = endpoint;
    CHECK_THROWS_WITH_AS(otlp::Exporter{options}, doctest::Contains("the OTLP endpoint"), Error);
  }
  otlp::ExporterOptions options;
  options.endpoint = "http://[::1]:4318/otel/";
  CHECK(otlp::Exporter(options).url() == "http://[::1]:4318/otel/v1/traces");
  options.endpoint = "http://collector";
  CHECK(otlp::Exporter(options).url() == "http://collector/v1/traces");
}

TEST_CASE("a span whose text is not UTF-8 is sent with the bad bytes replaced") {
  test::OtlpReceiver receiver;
  otlp::Exporter exporter(to(receiver));
  otlp::Span span = span_number(1);
  span.error = true;
  span.error_message = "bad byte \xff here";  // an exception's what() may hold anything
  exporter.add(span);
  exporter.add(span_number(2));
  exporter.flush();
  const auto spans = receiver.spans();
  REQUIRE(spans.size() == 2);
  CHECK(spans[0].status_message == "bad byte \xef\xbf\xbd here");
  CHECK(exporter.stats().sent == 2);
}
