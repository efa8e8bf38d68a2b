// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the HTTP server decides on a request, apart from the connection it came on: the checks
// of its header and, for a signed request, of its body; the answers it gives itself; and the
// message a response is sent as. Beast's types, as the server's parser gives them. Internal to
// runtime/ (and to the HTTP fuzzer, which runs them as the server does).

#include <boost/beast/core/error.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "http_server.hpp"
#include "http_signing.hpp"

namespace durable::ops::detail {

using Header = boost::beast::http::request<boost::beast::http::string_body>;

inline std::string_view to_std(boost::beast::string_view text) {
  return {text.data(), text.size()};
}

/// Seconds since the Unix epoch, by this host's clock.
std::int64_t unix_now();

/// 401 with a WWW-Authenticate challenge for each kind of credential the server takes.
HttpResponse unauthorized(const HttpOptions& options, std::string reason);
/// 503 with Retry-After: a limit of the server's, for a moment.
HttpResponse overloaded(std::string code, std::string message);
/// 401: the signature was accepted before.
HttpResponse replayed(const HttpOptions& options);
/// The answer to a client that speaks plain HTTP to a TLS port, sent in plain text.
HttpResponse plain_http_refused();

/// Everything decided on the header alone, before a body byte is read: fills in the request's
/// method, path, query and content type (and its signature, to check once the body is read), or
/// answers why it is refused.
std::optional<HttpResponse> refuse_header(const HttpOptions& options, const Header& header,
                                          HttpRequest& request,
                                          std::optional<Signature>& signature);

/// A signed request, once its body is read: the digest must match, the timestamp still be in
/// the window, and `guard` must not have accepted it before (it records it).
std::optional<HttpResponse> refuse_signed(const HttpOptions& options, ReplayGuard& guard,
                                          const Signature& signature, const Header& message);

/// The response the io thread sends itself (HttpOptions::static_responses), or nullptr.
const HttpResponse* static_response(const HttpOptions& options, const Header& message,
                                    const HttpRequest& request);

/// Why the handler's response cannot be sent as it is, or nullopt. The server frames the message
/// itself, so a handler may not set the headers that do (they would contradict it).
std::optional<std::string> invalid_response(const HttpResponse& response);

/// The message `response` is sent as (a 500 when it is invalid), with the headers every
/// response carries.
boost::beast::http::response<boost::beast::http::string_body> to_message(HttpResponse response,
                                                                         unsigned version,
                                                                         bool keep_alive,
                                                                         bool head);

/// Errors of the HTTP parser: the client sent something that is not HTTP we accept. Other read
/// errors (end of stream, reset, timeout, shutdown) leave nobody to answer.
bool is_malformed(const boost::beast::error_code& error);
/// The answer to a malformed request: 413, 431 or 400.
HttpResponse malformed(const boost::beast::error_code& error, const HttpOptions& options);

}  // namespace durable::ops::detail
