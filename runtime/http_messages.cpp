// SPDX-License-Identifier: Apache-2.0
#include "http_messages.hpp"

#include <boost/beast/http.hpp>
#include <chrono>
#include <utility>

#include "env.hpp"
#include "http_checks.hpp"

namespace durable::ops::detail {

namespace beast = boost::beast;
namespace http = beast::http;

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             durable::detail::Env::system().now().time_since_epoch())
      .count();
}

HttpResponse unauthorized(const HttpOptions& options, std::string reason) {
  HttpResponse response = json_error(401, "unauthorized", std::move(reason));
  for (auto& challenge : challenges(options)) {
    response.headers.emplace_back("WWW-Authenticate", std::move(challenge));
  }
  return response;
}

HttpResponse overloaded(std::string code, std::string message) {
  HttpResponse response = json_error(503, std::move(code), std::move(message));
  response.headers.emplace_back("Retry-After", "1");
  return response;
}

std::optional<HttpResponse> refuse_header(const HttpOptions& options, const Header& header,
                                          HttpRequest& request,
                                          std::optional<Signature>& signature) {
  request.method = std::string(to_std(header.method_string()));
  if (!decode_target(to_std(header.target()), request.path, request.query)) {
    return json_error(
        400, "bad_request",
        "the request target is not a path and query in valid percent-encoding of UTF-8 "
        "text without NUL");
  }
  if (const auto foreign = refuse_cross_site(options, to_std(header[http::field::host]),
                                             to_std(header[http::field::origin]))) {
    return json_error(403, "forbidden", *foreign);
  }
  const bool get = header.method() == http::verb::get || header.method() == http::verb::head;
  const bool bodiless = !header.chunked() && (!header.has_content_length() ||
                                              header[http::field::content_length] == "0");
  if (auto refusal =
          refuse_credentials(options, {request.path, get && bodiless},
                             to_std(header[http::field::authorization]), unix_now(), signature)) {
    return unauthorized(options, std::move(*refusal));
  }
  request.content_type = std::string(to_std(header[http::field::content_type]));
  request.traceparent = std::string(to_std(header["traceparent"]));
  request.last_event_id = std::string(to_std(header["Last-Event-ID"]));
  return std::nullopt;
}

const HttpResponse* static_response(const HttpOptions& options, const Header& message,
                                    const HttpRequest& request) {
  const bool read = message.method() == http::verb::get || message.method() == http::verb::head;
  if (!read || !request.body.empty()) return nullptr;
  const auto it = options.static_responses.find(request.path);
  return it == options.static_responses.end() ? nullptr : &it->second;
}

namespace {

bool holds_line_break(std::string_view text) {
  return text.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos;
}

}  // namespace

std::optional<std::string> invalid_response(const HttpResponse& response) {
  if (response.status < 100 || response.status > 599) {
    return "the handler answered status " + std::to_string(response.status);
  }
  if (holds_line_break(response.content_type)) return "the handler's content type holds CR or LF";
  for (const auto& [name, value] : response.headers) {
    if (name.empty() || holds_line_break(name) || holds_line_break(value)) {
      return "the handler's header '" + name + "' is empty or holds CR or LF";
    }
    for (std::string_view framing : {"Content-Length", "Transfer-Encoding", "Connection"}) {
      if (iequals(name, framing)) return "the handler set the header " + name;
    }
  }
  return std::nullopt;
}

http::response<http::string_body> to_message(HttpResponse response, unsigned version,
                                             bool keep_alive, bool head) {
  if (const auto invalid = invalid_response(response)) {
    response = json_error(500, "internal", *invalid);
  }
  http::response<http::string_body> message;
  message.version(version);
  message.result(static_cast<unsigned>(response.status));
  if (!response.content_type.empty()) message.set(http::field::content_type, response.content_type);
  for (const auto& [name, value] : response.headers) message.insert(name, value);
  // No page of this server may be framed by another site (clickjacking the dashboard's Retry
  // and Cancel). frame-ancestors only: the page's own policy (a meta tag) governs its scripts.
  message.set("X-Frame-Options", "DENY");
  message.set("Content-Security-Policy", "frame-ancestors 'none'");
  message.set("X-Content-Type-Options", "nosniff");
  message.keep_alive(keep_alive);
  // A response to HEAD says how long the body would be, and sends none.
  message.content_length(response.body.size());
  if (!head) message.body() = std::move(response.body);
  return message;
}

bool is_malformed(const beast::error_code& error) {
  static const auto& parser_errors = http::make_error_code(http::error::bad_target).category();
  return error.category() == parser_errors && error != http::error::end_of_stream &&
         error != http::error::partial_message;
}

HttpResponse malformed(const beast::error_code& error, const HttpOptions& options) {
  if (error == http::error::body_limit) {
    return json_error(
        413, "payload_too_large",
        "the request body is over the limit of " + std::to_string(options.max_body) + " bytes");
  }
  if (error == http::error::header_limit) {
    return json_error(431, "header_too_large",
                      "the request line and headers are over the limit of " +
                          std::to_string(options.max_header) + " bytes");
  }
  return json_error(400, "bad_request", "malformed HTTP request: " + error.message());
}

HttpResponse replayed(const HttpOptions& options) {
  return unauthorized(options,
                      "this signed request was accepted before (the same signature within the "
                      "window): a replay. Sign each request with a new nonce");
}

std::optional<HttpResponse> refuse_signed(const HttpOptions& options, ReplayGuard& guard,
                                          const Signature& signature, const Header& message) {
  if (auto mismatch = refuse_signature(options, signature, to_std(message.method_string()),
                                       to_std(message.target()), message.body())) {
    return unauthorized(options, std::move(*mismatch));
  }
  // The window again, at the time the guard forgets by: a header sent at the window's edge and
  // a body held back past it would otherwise meet a guard that has forgotten its first use.
  const std::int64_t now = unix_now();
  if (auto stale = refuse_timestamp(signature.timestamp, now, options.signature_window)) {
    return unauthorized(options, std::move(*stale));
  }
  const auto outcome =
      guard.accept(signature.digest, signature.timestamp + options.signature_window.count(), now);
  if (outcome == ReplayGuard::Outcome::replayed) return replayed(options);
  if (outcome == ReplayGuard::Outcome::full) {
    return overloaded("too_many_signatures",
                      "the server remembers as many signatures as it may (max_signatures) until "
                      "the oldest leave the window; try again");
  }
  return std::nullopt;
}

HttpResponse plain_http_refused() {
  return json_error(400, "bad_request",
                    "this server speaks HTTPS (TLS): use https:// in the URL, not http://");
}

}  // namespace durable::ops::detail
