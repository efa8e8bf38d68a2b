// SPDX-License-Identifier: Apache-2.0
#pragma once
// A small OTLP/HTTP receiver for the tests of traces: durable's own Beast server on an ephemeral
// loopback port, recording every body POSTed to /v1/traces, and the spans in them, as a
// collector would receive them. It can answer with another status, or hold requests back.

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "http_server.hpp"

namespace durable::test {

/// One span as received, its fields read back from the OTLP JSON.
struct ReceivedSpan {
  std::string trace_id, span_id, parent, name;
  std::int64_t start_ns = 0, end_ns = 0;
  int status = 0;  ///< 1 OK, 2 ERROR
  std::string status_message;
  nlohmann::json attributes = nlohmann::json::object();  ///< key: the value as JSON
  nlohmann::json resource = nlohmann::json::object();

  std::string attribute(const std::string& key) const {
    const auto it = attributes.find(key);
    if (it == attributes.end()) return {};
    return it->is_string() ? it->get<std::string>() : it->dump();
  }
};

class OtlpReceiver {
 public:
  OtlpReceiver() : server_(options(), [this](const ops::HttpRequest& r) { return receive(r); }) {}

  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_.port()); }

  /// What the next requests are answered with (200 by default).
  void answer(int status) {
    std::lock_guard lock(mutex_);
    status_ = status;
  }
  /// While held, requests wait unanswered (until released, or 30 s).
  void hold(bool on) {
    {
      std::lock_guard lock(mutex_);
      held_ = on;
    }
    changed_.notify_all();
  }

  std::vector<ReceivedSpan> spans() const {
    std::lock_guard lock(mutex_);
    return spans_;
  }
  std::vector<nlohmann::json> bodies() const {
    std::lock_guard lock(mutex_);
    return bodies_;
  }
  std::size_t requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  /// Waits up to `timeout` for at least `n` requests to have arrived.
  bool wait_requests(std::size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return requests_ >= n; });
  }

 private:
  static ops::HttpOptions options() {
    ops::HttpOptions o;
    o.port = 0;
    o.max_body = 16 << 20;
    o.public_paths = {"/v1/traces"};
    return o;
  }

  ops::HttpResponse receive(const ops::HttpRequest& request) {
    std::unique_lock lock(mutex_);
    ++requests_;
    changed_.notify_all();
    changed_.wait_for(lock, std::chrono::seconds(30), [&] { return !held_; });
    ops::HttpResponse response;
    if (request.method != "POST" || request.path != "/v1/traces" ||
        request.content_type != "application/json") {
      response.status = 400;
      response.body = R"({"error":"not an OTLP/HTTP JSON export"})";
      return response;
    }
    const nlohmann::json body = nlohmann::json::parse(request.body);
    bodies_.push_back(body);
    for (const auto& resource : body.at("resourceSpans")) {
      nlohmann::json resource_attributes = read_attributes(resource.at("resource"));
      for (const auto& scope : resource.at("scopeSpans")) {
        for (const auto& s : scope.at("spans")) {
          ReceivedSpan span;
          span.trace_id = s.at("traceId");
          span.span_id = s.at("spanId");
          span.parent = s.value("parentSpanId", "");
          span.name = s.at("name");
          span.start_ns = std::stoll(s.at("startTimeUnixNano").get<std::string>());
          span.end_ns = std::stoll(s.at("endTimeUnixNano").get<std::string>());
          span.status = s.at("status").at("code");
          span.status_message = s.at("status").value("message", "");
          span.attributes = read_attributes(s);
          span.resource = resource_attributes;
          spans_.push_back(std::move(span));
        }
      }
    }
    response.status = status_;
    response.body = status_ / 100 == 2 ? "{}" : R"({"error":"refused by the test"})";
    return response;
  }

  // An OTLP attribute list as one object: {"key": value}, int64 strings made numbers again.
  static nlohmann::json read_attributes(const nlohmann::json& holder) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& kv : holder.value("attributes", nlohmann::json::array())) {
      const nlohmann::json& v = kv.at("value");
      if (v.contains("stringValue")) out[kv.at("key")] = v.at("stringValue");
      if (v.contains("intValue"))
        out[kv.at("key")] = std::stoll(v.at("intValue").get<std::string>());
      if (v.contains("boolValue")) out[kv.at("key")] = v.at("boolValue");
      if (v.contains("doubleValue")) out[kv.at("key")] = v.at("doubleValue");
    }
    return out;
  }

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int status_ = 200;
  bool held_ = false;
  std::size_t requests_ = 0;
  std::vector<nlohmann::json> bodies_;
  std::vector<ReceivedSpan> spans_;
  ops::HttpServer server_;  // last: it stops before what its handler uses goes
};

}  // namespace durable::test
