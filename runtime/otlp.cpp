// SPDX-License-Identifier: Apache-2.0
#include "otlp.hpp"

#include <durable/version.hpp>

namespace durable::ops::otlp {

namespace {

using nlohmann::json;

// An AnyValue: which field holds the value says its type.
json any_value(const json& value) {
  if (value.is_boolean()) return {{"boolValue", value.get<bool>()}};
  if (value.is_number_integer()) return {{"intValue", value.dump()}};  // int64: a string
  if (value.is_number_float()) return {{"doubleValue", value.get<double>()}};
  if (value.is_string()) return {{"stringValue", value.get<std::string>()}};
  return {{"stringValue", value.dump()}};  // anything else, as its JSON text
}

json key_values(const std::vector<std::pair<std::string, json>>& attributes) {
  json out = json::array();
  for (const auto& [key, value] : attributes) {
    out.push_back({{"key", key}, {"value", any_value(value)}});
  }
  return out;
}

constexpr int kKindInternal = 1;
constexpr int kStatusOk = 1;
constexpr int kStatusError = 2;

json span_json(const Span& span) {
  json out = {{"traceId", trace::hex(span.trace_id)},
              {"spanId", trace::hex(span.span_id)},
              {"name", span.name},
              {"kind", kKindInternal},
              {"startTimeUnixNano", std::to_string(span.start_unix_ns)},
              {"endTimeUnixNano", std::to_string(span.end_unix_ns)},
              {"attributes", key_values(span.attributes)}};
  if (span.parent) out["parentSpanId"] = trace::hex(*span.parent);
  out["status"] = span.error ? json{{"code", kStatusError}, {"message", span.error_message}}
                             : json{{"code", kStatusOk}};
  return out;
}

}  // namespace

nlohmann::json export_request(const std::vector<Span>& spans, const std::string& service_name,
                              const std::string& service_version) {
  std::vector<std::pair<std::string, json>> resource = {{"service.name", service_name}};
  if (!service_version.empty()) resource.emplace_back("service.version", service_version);
  json list = json::array();
  for (const Span& span : spans) list.push_back(span_json(span));
  return {
      {"resourceSpans",
       json::array(
           {{{"resource", {{"attributes", key_values(resource)}}},
             {"scopeSpans",
              json::array({{{"scope", {{"name", "durable"}, {"version", std::string(version())}}},
                            {"spans", std::move(list)}}})}}})}};
}

}  // namespace durable::ops::otlp
