// SPDX-License-Identifier: Apache-2.0
#pragma once
// Sends finished spans to an OpenTelemetry collector (RuntimeOptions::otlp_endpoint), off the
// step path: add() only queues a span, and a thread of the exporter's own POSTs them in batches
// to <endpoint>/v1/traces as OTLP/HTTP JSON. The queue is bounded; a span that finds it full is
// dropped and counted, so a slow or absent collector never holds a step up or grows memory.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "env.hpp"
#include "otlp.hpp"

namespace durable::ops::otlp {

struct ExporterOptions {
  /// The collector's base URL, "http://host[:port][/prefix]" (port 80 when not given).
  std::string endpoint;
  std::string service_name = "durable";
  std::string service_version{};
  std::size_t max_queue = 8192;  ///< spans waiting; past this, new ones are dropped
  std::size_t max_batch = 512;   ///< spans in one request
  /// Queued spans wait at most this long for a batch to fill before they are sent.
  std::chrono::milliseconds interval{1000};
  /// The limit of a connect, and of one request's write and answer. Closing sends what is queued
  /// until a batch fails or this has passed.
  std::chrono::milliseconds timeout{5000};
  /// Called from the exporter's thread when a batch could not be sent (at most once a minute,
  /// with how many spans were lost since the last call).
  std::function<void(const std::string& message)> on_error{};
};

/// What has become of the spans added so far.
struct ExportStats {
  std::uint64_t sent = 0;     ///< accepted by the collector (a 2xx answer)
  std::uint64_t dropped = 0;  ///< found the queue full
  std::uint64_t failed = 0;   ///< in a batch the collector refused or could not be reached for
};

class Exporter {
 public:
  /// Throws durable::Error for an endpoint that is not an http:// URL with a host.
  /// `env` (its thread, its clock) outlives the exporter.
  explicit Exporter(ExporterOptions options,
                    durable::detail::Env& env = durable::detail::Env::system());
  /// Sends what is queued (within options.timeout), then stops.
  ~Exporter();
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  /// Queues a span, or drops it when the queue is full. Never waits on the network.
  void add(Span span);
  /// Waits until every span added before the call has been sent, refused or dropped.
  void flush();
  ExportStats stats() const;
  /// "http://host:port/prefix/v1/traces": where the batches go.
  const std::string& url() const { return url_; }

 private:
  void loop();
  // POSTs one batch; false with why when the collector did not accept it.
  bool post(const std::string& body, std::string& why);
  void report(const std::string& why, std::size_t lost);

  ExporterOptions options_;
  durable::detail::Env& env_;
  std::string host_, port_, authority_, target_, url_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;      // the thread: a batch is full, a flush, or stopping
  std::condition_variable progress_;  // flush(): a batch went
  std::deque<Span> queue_;
  std::uint64_t added_ = 0;     // spans queued so far (dropped ones not counted)
  std::uint64_t finished_ = 0;  // of those, sent or failed
  bool flushing_ = false;
  bool stopping_ = false;
  ExportStats stats_;
  std::chrono::steady_clock::time_point last_report_{};
  std::uint64_t lost_since_report_ = 0;

  struct Connection;
  std::unique_ptr<Connection> connection_;  // the thread's, kept between batches
  std::thread thread_;
};

}  // namespace durable::ops::otlp
