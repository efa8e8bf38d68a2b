// SPDX-License-Identifier: Apache-2.0
// W3C traceparent parsing and the span ids derived from the journal (issue 18).

#include "trace_context.hpp"

#include <doctest/doctest.h>

#include <set>

#include "otlp.hpp"

using namespace durable::detail::trace;

TEST_CASE("traceparent: the W3C example parses and formats back the same") {
  const std::string example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const auto parent = parse_traceparent(example);
  REQUIRE(parent);
  CHECK(hex(parent->trace_id) == "4bf92f3577b34da6a3ce929d0e0e4736");
  CHECK(hex(parent->span_id) == "00f067aa0ba902b7");
  CHECK(parent->flags == 1);
  CHECK(format_traceparent(*parent) == example);
}

TEST_CASE("traceparent: what W3C calls invalid is refused") {
  for (const char* bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",       // no flags
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // 00 with more
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero span id
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // uppercase
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // separator
           "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",    // not hex
           "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",   // later, no '-'
       }) {
    CAPTURE(std::string(bad));
    CHECK_FALSE(parse_traceparent(bad));
  }
  // A later version is read by its first four fields.
  CHECK(parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future"));
}

TEST_CASE("span ids: the same journal gives the same ids, anything else another") {
  CHECK(run_span("r1") == run_span("r1"));
  CHECK(trace_id_of_run("r1") == trace_id_of_run("r1"));
  CHECK(step_span("r1", "charge", 2) == step_span("r1", "charge", 2));
  std::set<std::string> ids = {hex(run_span("r1")),
                               hex(run_span("r2")),
                               hex(step_span("r1", "charge", 1)),
                               hex(step_span("r1", "charge", 2)),
                               hex(step_span("r2", "charge", 1)),
                               hex(step_span("r1", "charg", 1)),
                               hex(step_span("r1c", "harge", 1))};
  CHECK(ids.size() == 7);
  CHECK(hex(trace_id_of_run("r1")).size() == 32);
  CHECK(hex(step_span("r1", "a", 1)).size() == 16);
}

TEST_CASE("otlp: a span reads as the OTLP/HTTP JSON mapping writes it") {
  using durable::ops::otlp::Span;
  Span root;
  root.trace_id = trace_id_of_run("r1");
  root.span_id = run_span("r1");
  root.name = "run order";
  root.start_unix_ns = 1764249600000000000;
  root.end_unix_ns = 1764249601500000000;
  root.attributes = {{"durable.run_id", "r1"},
                     {"durable.attempt", 2},
                     {"durable.replayed", false},
                     {"durable.ratio", 0.5}};
  Span step = root;
  step.span_id = step_span("r1", "charge", 1);
  step.parent = root.span_id;
  step.name = "step charge";
  step.error = true;
  step.error_message = "card declined";
  const auto body = durable::ops::otlp::export_request({root, step}, "shop", "1.2");
  const auto& resource = body.at("resourceSpans").at(0);
  CHECK(resource.at("resource").at("attributes").at(0) ==
        nlohmann::json::parse(R"({"key":"service.name","value":{"stringValue":"shop"}})"));
  const auto& scope = resource.at("scopeSpans").at(0);
  CHECK(scope.at("scope").at("name") == "durable");
  const auto& spans = scope.at("spans");
  REQUIRE(spans.size() == 2);
  CHECK(spans[0].at("traceId") == hex(trace_id_of_run("r1")));
  CHECK(spans[0].at("spanId") == hex(run_span("r1")));
  CHECK_FALSE(spans[0].contains("parentSpanId"));
  CHECK(spans[0].at("startTimeUnixNano") == "1764249600000000000");  // int64 as a string
  CHECK(spans[0].at("kind") == 1);
  CHECK(spans[0].at("status") == nlohmann::json::parse(R"({"code":1})"));
  CHECK(spans[0].at("attributes").at(1) ==
        nlohmann::json::parse(R"({"key":"durable.attempt","value":{"intValue":"2"}})"));
  CHECK(spans[0].at("attributes").at(2).at("value") ==
        nlohmann::json::parse(R"({"boolValue":false})"));
  CHECK(spans[0].at("attributes").at(3).at("value") ==
        nlohmann::json::parse(R"({"doubleValue":0.5})"));
  CHECK(spans[1].at("parentSpanId") == hex(run_span("r1")));
  CHECK(spans[1].at("status") == nlohmann::json::parse(R"({"code":2,"message":"card declined"})"));
}
