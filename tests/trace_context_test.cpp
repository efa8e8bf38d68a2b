// SPDX-License-Identifier: Apache-2.0
// W3C traceparent parsing and the span ids derived from the journal (issue 18).

#include "trace_context.hpp"

#include <doctest/doctest.h>

#include <set>

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
