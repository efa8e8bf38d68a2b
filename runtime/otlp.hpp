// SPDX-License-Identifier: Apache-2.0
#pragma once
// Spans as OTLP/HTTP with JSON encoding sends them (issue 18): the request body of
// POST /v1/traces, as the OTLP specification's JSON mapping writes it (ids in lowercase hex,
// 64-bit numbers as decimal strings, enums as numbers). No OpenTelemetry package exists in
// Debian 12, and the protocol is a documented schema: this and a Beast client are all durable
// needs. Pure; the exporter that batches and sends is apart.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trace_context.hpp"

namespace durable::ops::otlp {

namespace trace = ::durable::detail::trace;

/// One finished span.
struct Span {
  trace::TraceId trace_id{};
  trace::SpanId span_id{};
  std::optional<trace::SpanId> parent{};  ///< none: the root of its trace here
  std::string name;
  std::int64_t start_unix_ns = 0;
  std::int64_t end_unix_ns = 0;
  bool error = false;  ///< status ERROR (with error_message); otherwise OK
  std::string error_message{};
  /// Attributes, in order: a string, an integer, a boolean or a double each.
  std::vector<std::pair<std::string, nlohmann::json>> attributes{};
};

/// The body of one export request: every span under one resource (service.name, and
/// service.version when not empty) and one scope ("durable" at durable's version).
nlohmann::json export_request(const std::vector<Span>& spans, const std::string& service_name,
                              const std::string& service_version = {});

}  // namespace durable::ops::otlp
