// SPDX-License-Identifier: Apache-2.0
#include "otlp_exporter.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <durable/errors.hpp>
#include <durable/version.hpp>
#include <vector>

namespace durable::ops::otlp {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// A collector's answer is a small JSON object (partial success, at most); more is not read.
constexpr std::size_t kMaxAnswerBytes = 64 * 1024;
constexpr std::chrono::minutes kReportEvery{1};

}  // namespace

// The exporter thread's connection to the collector, kept alive between batches. Its operations
// are asynchronous only so that the stream's deadline applies to them: each runs the context
// until it is done.
struct Exporter::Connection {
  asio::io_context io;
  beast::tcp_stream stream{io};
  beast::flat_buffer buffer;
  bool open = false;

  void close() {
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.close();
    buffer.clear();
    open = false;
  }
  void run() {
    io.restart();
    io.run();
  }
};

Exporter::Exporter(ExporterOptions options, durable::detail::Env& env)
    : options_(std::move(options)), env_(env), connection_(std::make_unique<Connection>()) {
  const std::string& endpoint = options_.endpoint;
  constexpr std::string_view kScheme = "http://";
  const auto refuse = [&](const std::string& why) {
    throw Error(errc::config, "the OTLP endpoint '" + endpoint + "' " + why +
                                  ": give the collector's base URL, as \"http://localhost:4318\"");
  };
  if (endpoint.starts_with("https://")) {
    refuse(
        "uses https, which the exporter does not speak; send to a collector on this host or "
        "network over http, and let it forward over TLS");
  }
  if (!endpoint.starts_with(kScheme)) refuse("is not an http:// URL");
  std::string_view rest = std::string_view(endpoint).substr(kScheme.size());
  const std::size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  std::string prefix(slash == std::string_view::npos ? std::string_view() : rest.substr(slash));
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (prefix.find_first_of("?# ") != std::string::npos) refuse("has a query or a fragment");
  std::string_view host = authority;
  port_ = "80";
  if (authority.starts_with('[')) {  // an IPv6 address: [::1]:4318
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) refuse("has an IPv6 address without its ']'");
    host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') refuse("has something after its IPv6 address");
      port_ = std::string(authority.substr(close + 2));
    }
  } else if (const std::size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port_ = std::string(authority.substr(colon + 1));
  }
  if (host.empty()) refuse("names no host");
  if (port_.empty() || port_.size() > 5 ||
      port_.find_first_not_of("0123456789") != std::string::npos || std::stoi(port_) == 0 ||
      std::stoi(port_) > 65535) {
    refuse("has a port that is not a number from 1 to 65535");
  }
  host_ = std::string(host);
  authority_ = std::string(authority);
  if (authority_.find(':', authority_.rfind(']') + 1) == std::string::npos) authority_ += ":80";
  target_ = prefix + "/v1/traces";
  url_ = "http://" + std::string(authority) + target_;
  if (options_.max_batch == 0) options_.max_batch = 1;
  thread_ = env_.start_thread([this] { loop(); });
}

Exporter::~Exporter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Exporter::add(Span span) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || queue_.size() >= options_.max_queue) {
      ++stats_.dropped;
      return;
    }
    queue_.push_back(std::move(span));
    ++added_;
    if (queue_.size() < options_.max_batch) return;
  }
  wake_.notify_one();
}

void Exporter::flush() {
  std::unique_lock lock(mutex_);
  const std::uint64_t target = added_;
  flushing_ = true;
  wake_.notify_all();
  progress_.wait(lock, [&] { return finished_ >= target; });
  flushing_ = false;
}

ExportStats Exporter::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Exporter::loop() {
  std::unique_lock lock(mutex_);
  std::optional<std::chrono::steady_clock::time_point> give_up;  // once stopping
  for (;;) {
    env_.wait_for(wake_, lock, options_.interval, [&] {
      return stopping_ || queue_.size() >= options_.max_batch || (flushing_ && !queue_.empty());
    });
    if (stopping_ && !give_up) give_up = env_.steady_now() + options_.timeout;
    if (queue_.empty()) {
      if (stopping_) return;
      continue;
    }
    const std::size_t n = std::min(queue_.size(), options_.max_batch);
    std::vector<Span> batch(std::make_move_iterator(queue_.begin()),
                            std::make_move_iterator(queue_.begin() + static_cast<long>(n)));
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<long>(n));
    lock.unlock();
    std::string why;
    bool sent = false;
    try {
      // An error message is the application's text, which may not be UTF-8: replaced, not thrown.
      sent = post(export_request(batch, options_.service_name, options_.service_version)
                      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  why);
      if (!sent) report(why, n);
    } catch (...) {  // out of memory, or a log sink that threw: not fatal
      sent = false;
      connection_->close();
    }
    lock.lock();
    (sent ? stats_.sent : stats_.failed) += n;
    finished_ += n;
    // Past its time to stop, or unable to send while stopping: what is left is lost.
    if (stopping_ && (!sent || env_.steady_now() >= *give_up)) {
      stats_.failed += queue_.size();
      finished_ += queue_.size();
      queue_.clear();
    }
    progress_.notify_all();
  }
}

bool Exporter::post(const std::string& body, std::string& why) {
  Connection& c = *connection_;
  http::request<http::string_body> request{http::verb::post, target_, 11};
  request.set(http::field::host, authority_);
  request.set(http::field::content_type, "application/json");
  request.set(http::field::user_agent, "durable/" + std::string(version()));
  request.keep_alive(true);
  request.body() = body;
  request.prepare_payload();
  // A kept connection the collector has closed meanwhile fails at once: then once more, anew.
  for (int round = 0; round < 2; ++round) {
    const bool reused = c.open;
    beast::error_code error;
    if (!c.open) {
      tcp::resolver resolver(c.io);
      const auto found = resolver.resolve(host_, port_, error);
      if (error) {
        why = "cannot resolve " + host_ + ": " + error.message();
        return false;
      }
      c.stream.expires_after(options_.timeout);
      c.stream.async_connect(found, [&](beast::error_code e, const tcp::endpoint&) { error = e; });
      c.run();
      if (error) {
        c.close();
        why = "cannot connect to " + url_ + ": " + error.message();
        return false;
      }
      c.open = true;
    }
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxAnswerBytes);
    c.stream.expires_after(options_.timeout);
    http::async_write(c.stream, request, [&](beast::error_code e, std::size_t) {
      error = e;
      if (!e)
        http::async_read(c.stream, c.buffer, parser,
                         [&](beast::error_code r, std::size_t) { error = r; });
    });
    c.run();
    if (error) {
      c.close();
      // A kept connection closed meanwhile fails at once; a timeout is no reason to send again
      // (the collector may have the batch already).
      if (reused && round == 0 && error != beast::error::timeout) continue;
      why = "no answer from " + url_ + ": " + error.message();
      return false;
    }
    const auto& answer = parser.get();
    if (!answer.keep_alive()) c.close();
    if (answer.result_int() / 100 == 2) return true;
    why = url_ + " answered " + std::to_string(answer.result_int()) + ": " +
          answer.body().substr(0, 200);
    return false;
  }
  return false;  // not reached
}

void Exporter::report(const std::string& why, std::size_t lost) {
  if (!options_.on_error) return;
  std::uint64_t total = 0;
  {
    std::lock_guard lock(mutex_);
    lost_since_report_ += lost;
    const auto now = env_.steady_now();
    if (last_report_ != std::chrono::steady_clock::time_point{} &&
        now - last_report_ < kReportEvery) {
      return;
    }
    last_report_ = now;
    total = lost_since_report_;
    lost_since_report_ = 0;
  }
  options_.on_error("spans not exported (" + std::to_string(total) +
                    " lost since the last "
                    "report): " +
                    why);
}

}  // namespace durable::ops::otlp
