// The HTTP server: one acceptor and one Session per connection, all on an io_context run by a few
// threads. Each session lives on its own strand, so its handlers never run concurrently; its
// pending operations hold it (shared_from_this), and it ends when the last one completes.
//
// Stopping does not ask sessions to finish: the io threads end, then the io_context is destroyed,
// which destroys every pending operation and so every session, closing its socket. This is what
// makes stop() prompt whatever state a connection is in (idle, mid-request, mid-response).

#include "http_server.hpp"

#include <algorithm>
#include <array>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <durable/errors.hpp>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <thread>

namespace durable::ops {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// How long a connection that is being closed (after an error response, or Connection: close)
// may keep sending before the socket is closed; see Session::linger.
constexpr std::chrono::milliseconds kLingerTime{1000};
// A pause before accepting again when accept fails (out of file descriptors): not a busy loop.
constexpr std::chrono::milliseconds kAcceptRetry{50};
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

struct Config {
  HttpOptions options;
  HttpHandler handler;
};

std::string_view to_std(beast::string_view text) { return {text.data(), text.size()}; }

// ASCII case-insensitive equality, as HTTP compares header names and tokens.
bool iequals(std::string_view a, std::string_view b) {
  return beast::iequals(beast::string_view(a.data(), a.size()),
                        beast::string_view(b.data(), b.size()));
}

// ---- Decoding the target -------------------------------------------------------------------

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX decoded; '+' is a space only in the query. nullopt for a '%' not followed by two hex digits.
std::optional<std::string> percent_decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+' && plus_is_space) {
      out += ' ';
    } else if (text[i] != '%') {
      out += text[i];
    } else {
      if (i + 2 >= text.size()) return std::nullopt;
      const int high = hex_digit(text[i + 1]);
      const int low = hex_digit(text[i + 2]);
      if (high < 0 || low < 0) return std::nullopt;
      out += static_cast<char>(high * 16 + low);
      i += 2;
    }
  }
  return out;
}

bool decode_query(std::string_view query, std::map<std::string, std::string>& out) {
  while (!query.empty()) {
    const auto ampersand = query.find('&');
    const std::string_view pair = query.substr(0, ampersand);
    query = ampersand == std::string_view::npos ? std::string_view() : query.substr(ampersand + 1);
    if (pair.empty()) continue;
    const auto equals = pair.find('=');
    auto name = percent_decode(pair.substr(0, equals), true);
    auto value = percent_decode(
        equals == std::string_view::npos ? std::string_view() : pair.substr(equals + 1), true);
    if (!name || !value) return false;
    out.insert_or_assign(std::move(*name), std::move(*value));
  }
  return true;
}

// Only the origin form ("/path?query") is served: no proxy (absolute) or OPTIONS (*) forms.
bool decode_target(std::string_view target, HttpRequest& request) {
  if (target.empty() || target.front() != '/') return false;
  const auto question = target.find('?');
  auto path = percent_decode(target.substr(0, question), false);
  if (!path) return false;
  request.path = std::move(*path);
  return question == std::string_view::npos ||
         decode_query(target.substr(question + 1), request.query);
}

// ---- The token -----------------------------------------------------------------------------

// The time taken depends on the length of what the client sent, never on where it first differs
// from the token, so the token cannot be guessed byte by byte.
bool equal_in_constant_time(std::string_view given, std::string_view expected) {
  unsigned char difference = given.size() == expected.size() ? 0 : 1;
  for (std::size_t i = 0; i < given.size(); ++i) {
    const char wanted = expected.empty() ? '\0' : expected[i % expected.size()];
    difference |= static_cast<unsigned char>(given[i] ^ wanted);
  }
  return difference == 0;
}

// nullopt when the request may go on; otherwise why not.
std::optional<std::string> refuse_token(const HttpOptions& options, const std::string& path,
                                        std::string_view authorization) {
  if (options.token.empty()) return std::nullopt;
  const auto& open = options.public_paths;
  if (std::find(open.begin(), open.end(), path) != open.end()) return std::nullopt;
  constexpr std::string_view kScheme = "Bearer ";
  if (authorization.size() < kScheme.size() ||
      !iequals(authorization.substr(0, kScheme.size()), kScheme)) {
    return "this server needs the header 'Authorization: Bearer <token>'";
  }
  std::string_view given = authorization.substr(kScheme.size());
  while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
  while (!given.empty() && given.back() == ' ') given.remove_suffix(1);
  if (!equal_in_constant_time(given, options.token)) return "the bearer token is wrong";
  return std::nullopt;
}

// ---- Browsers on other sites ----------------------------------------------------------------

bool is_loopback_name(std::string_view host) {
  if (iequals(host, "localhost")) return true;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  beast::error_code error;
  const asio::ip::address address = asio::ip::make_address(host, error);
  return !error && address.is_loopback();
}

// "127.0.0.1:8080" -> "127.0.0.1"; "[::1]:8080" -> "[::1]".
std::string_view without_port(std::string_view host) {
  if (!host.empty() && host.front() == '[') return host.substr(0, host.find(']') + 1);
  return host.substr(0, host.rfind(':'));
}

// A page on another site can make the operator's browser send requests here (a form, a no-cors
// fetch), and, by rebinding its own name to 127.0.0.1, read the answers. Browsers say where a
// request comes from, so refuse: an Origin that is not this server, and, on a loopback address,
// a Host that is not a loopback name. Clients that are not browsers send no Origin.
std::optional<std::string> refuse_cross_site(const HttpOptions& options, std::string_view host,
                                             std::string_view origin) {
  if (is_loopback_name(options.address) && !host.empty() && !is_loopback_name(without_port(host))) {
    return "the Host header '" + std::string(host) +
           "' does not name this loopback server: a page on another site cannot reach it";
  }
  if (origin.empty()) return std::nullopt;
  const auto scheme_end = origin.find("://");
  const std::string_view authority =
      scheme_end == std::string_view::npos ? std::string_view() : origin.substr(scheme_end + 3);
  if (authority.empty() || !iequals(authority, host)) {
    return "the request comes from another site (Origin '" + std::string(origin) +
           "'): the API answers only its own page and clients that are not browsers";
  }
  return std::nullopt;
}

// ---- Requests to responses -----------------------------------------------------------------

HttpResponse call_handler(const HttpHandler& handler, const HttpRequest& request) {
  try {
    return handler(request);
  } catch (const std::exception& error) {
    return json_error(500, "internal", error.what());
  } catch (...) {
    return json_error(500, "internal", "the handler threw something that is not a std::exception");
  }
}

HttpResponse answer(const Config& config, http::request<http::string_body>&& message) {
  HttpRequest request;
  request.method = std::string(to_std(message.method_string()));
  if (!decode_target(to_std(message.target()), request)) {
    return json_error(400, "bad_request",
                      "the request target is not a path and query in valid percent-encoding");
  }
  if (const auto foreign = refuse_cross_site(config.options, to_std(message[http::field::host]),
                                             to_std(message[http::field::origin]))) {
    return json_error(403, "forbidden", *foreign);
  }
  const auto refusal =
      refuse_token(config.options, request.path, to_std(message[http::field::authorization]));
  if (refusal) {
    HttpResponse response = json_error(401, "unauthorized", *refusal);
    response.headers.emplace_back("WWW-Authenticate", "Bearer");
    return response;
  }
  request.content_type = std::string(to_std(message[http::field::content_type]));
  request.body = std::move(message.body());
  return call_handler(config.handler, request);
}

bool holds_line_break(std::string_view text) {
  return text.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos;
}

// Why the handler's response cannot be sent as it is, or nullopt. The server frames the message
// itself, so a handler may not set the headers that do (they would contradict it).
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
  message.keep_alive(keep_alive);
  // A response to HEAD says how long the body would be, and sends none.
  message.content_length(response.body.size());
  if (!head) message.body() = std::move(response.body);
  return message;
}

// Errors of the HTTP parser: the client sent something that is not HTTP we accept. Other read
// errors (end of stream, reset, timeout, shutdown) leave nobody to answer.
bool is_malformed(const beast::error_code& error) {
  static const auto& parser_errors = http::make_error_code(http::error::bad_target).category();
  return error.category() == parser_errors && error != http::error::end_of_stream &&
         error != http::error::partial_message;
}

// ---- One connection ------------------------------------------------------------------------

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const Config& config) : stream_(std::move(socket)), config_(config) {}

  void start() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_header(); });
  }

 private:
  // The header first, so that a body over the limit is refused before it is read and a client
  // waiting for 100 Continue gets it.
  void read_header() {
    parser_.emplace();
    parser_->body_limit(config_.options.max_body);
    stream_.expires_after(config_.options.idle_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code error, std::size_t) {
                              self->on_header(error);
                            });
  }

  void on_header(beast::error_code error) {
    if (error) return on_read_error(error);
    const auto& header = parser_->get();
    const bool expects_continue = header.version() == 11 && !parser_->is_done() &&
                                  beast::iequals(header[http::field::expect], "100-continue");
    if (!expects_continue) return read_body();
    asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                      [self = shared_from_this()](beast::error_code write_error, std::size_t) {
                        if (write_error) return self->close();
                        self->read_body();
                      });
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code error, std::size_t) {
                       self->on_request(error);
                     });
  }

  void on_request(beast::error_code error) {
    if (error) return on_read_error(error);
    auto message = parser_->release();
    const unsigned version = message.version();
    const bool keep_alive = message.keep_alive();
    const bool head = message.method() == http::verb::head;
    send(answer(config_, std::move(message)), version, keep_alive, head);
  }

  // After a malformed request the stream is lost (where would the next request begin?), so the
  // error is answered and the connection closed.
  void on_read_error(beast::error_code error) {
    if (!is_malformed(error)) return close();
    if (error == http::error::body_limit) {
      return send(json_error(413, "payload_too_large",
                             "the request body is over the limit of " +
                                 std::to_string(config_.options.max_body) + " bytes"),
                  11, false, false);
    }
    send(json_error(400, "bad_request", "malformed HTTP request: " + error.message()), 11, false,
         false);
  }

  void send(HttpResponse response, unsigned version, bool keep_alive, bool head) {
    response_ = to_message(std::move(response), version, keep_alive, head);
    stream_.expires_after(config_.options.idle_timeout);
    http::async_write(stream_, response_,
                      [self = shared_from_this()](beast::error_code error, std::size_t) {
                        if (error) return self->close();
                        if (self->response_.keep_alive()) return self->read_header();
                        self->linger();
                      });
  }

  // Closing a socket with unread input makes the kernel send a reset, which can destroy the
  // response before the client reads it (a 413 while the client still sends its body). So:
  // send FIN, then read and discard until the client closes too, for at most kLingerTime.
  void linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(kLingerTime);
    discard();
  }

  void discard() {
    stream_.async_read_some(asio::buffer(discarded_),
                            [self = shared_from_this()](beast::error_code error, std::size_t) {
                              if (error) return self->close();
                              self->discard();
                            });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  const Config& config_;  // owned by the server, which destroys every session before it
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;  // a fresh one per request
  http::response<http::string_body> response_;                     // kept alive while written
  std::array<char, 4096> discarded_;
};

tcp::endpoint endpoint_to_bind(const HttpOptions& options) {
  beast::error_code error;
  const asio::ip::address address = options.address == "localhost"
                                        ? asio::ip::address(asio::ip::address_v4::loopback())
                                        : asio::ip::make_address(options.address, error);
  if (error) {
    throw Error("cannot serve HTTP on '" + options.address +
                "': not an IP address; use 127.0.0.1, ::1, localhost, 0.0.0.0, :: or an address "
                "of this host");
  }
  if (!address.is_loopback() && options.token.empty()) {
    throw Error("refusing to serve HTTP on " + options.address +
                " without a token: anyone who can reach it could start and cancel runs; set a "
                "bearer token or bind a loopback address (127.0.0.1)");
  }
  return {address, options.port};
}

std::string host_and_port(const asio::ip::address& address, unsigned short port) {
  const std::string host = address.is_v6() ? "[" + address.to_string() + "]" : address.to_string();
  return host + ":" + std::to_string(port);
}

void listen(tcp::acceptor& acceptor, const tcp::endpoint& endpoint) {
  beast::error_code error;
  acceptor.open(endpoint.protocol(), error);
  // Lets a restarted server bind while old connections sit in TIME_WAIT; on Linux it does not
  // let two servers listen on one port.
  if (!error) acceptor.set_option(asio::socket_base::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  if (!error) acceptor.listen(asio::socket_base::max_listen_connections, error);
  if (!error) return;
  std::string message = "cannot listen for HTTP on " +
                        host_and_port(endpoint.address(), endpoint.port()) + ": " + error.message();
  if (error == asio::error::address_in_use) message += "; another process listens there";
  throw Error(message);
}

}  // namespace

HttpResponse json_error(int status, std::string code, std::string message) {
  const nlohmann::json body = {
      {"error", {{"code", std::move(code)}, {"message", std::move(message)}}}};
  HttpResponse response;
  response.status = status;
  // An exception's what() may hold bytes that are not UTF-8: replace them rather than throw.
  response.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return response;
}

// ---- The server ----------------------------------------------------------------------------

struct HttpServer::Impl {
  Impl(HttpOptions options, HttpHandler handler);
  void accept();
  void on_accept(beast::error_code error, tcp::socket socket);
  void run_io();
  void stop();

  Config config;
  // Reset in this order by stop(), once no io thread runs: the io_context last.
  std::optional<asio::io_context> io;
  std::optional<tcp::acceptor> acceptor;
  std::optional<asio::steady_timer> accept_retry;
  tcp::endpoint endpoint;
  std::vector<std::thread> threads;
  std::mutex stop_mutex;
  bool stopped = false;  // guarded by stop_mutex
};

namespace {
// The server whose io thread this is, if any: stop() must not join the thread it runs on.
thread_local const void* serving_on_this_thread = nullptr;
}  // namespace

HttpServer::Impl::Impl(HttpOptions options, HttpHandler handler)
    : config{std::move(options), std::move(handler)} {
  const tcp::endpoint wanted = endpoint_to_bind(config.options);
  const int thread_count = std::max(1, config.options.threads);
  io.emplace(thread_count);
  acceptor.emplace(*io);
  accept_retry.emplace(*io);
  listen(*acceptor, wanted);
  endpoint = acceptor->local_endpoint();
  accept();
  try {
    for (int i = 0; i < thread_count; ++i) {
      threads.emplace_back([this] { run_io(); });
    }
  } catch (...) {
    stop();
    throw;
  }
}

void HttpServer::Impl::accept() {
  acceptor->async_accept(
      asio::make_strand(*io),
      [this](beast::error_code error, tcp::socket socket) { on_accept(error, std::move(socket)); });
}

void HttpServer::Impl::on_accept(beast::error_code error, tcp::socket socket) {
  if (error == asio::error::operation_aborted) return;
  if (error) {
    accept_retry->expires_after(kAcceptRetry);
    accept_retry->async_wait([this](beast::error_code wait_error) {
      if (!wait_error) accept();
    });
    return;
  }
  std::make_shared<Session>(std::move(socket), config)->start();
  accept();
}

void HttpServer::Impl::run_io() {
  serving_on_this_thread = this;
  // Completion handlers do not throw (the user's handler is caught in call_handler); should one
  // run out of memory, the session it served is dropped and the thread goes on serving.
  for (;;) {
    try {
      io->run();
      return;
    } catch (const std::exception&) {
    }
  }
}

void HttpServer::Impl::stop() {
  if (serving_on_this_thread == this) {
    io->stop();
    return;
  }
  std::lock_guard lock(stop_mutex);
  if (stopped) return;
  io->stop();
  for (auto& thread : threads) thread.join();
  accept_retry.reset();
  acceptor.reset();
  io.reset();  // destroys every session with its pending operations: closes all connections
  stopped = true;
}

HttpServer::HttpServer(HttpOptions options, HttpHandler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}

HttpServer::~HttpServer() { impl_->stop(); }

unsigned short HttpServer::port() const { return impl_->endpoint.port(); }

std::string HttpServer::url() const {
  return "http://" + host_and_port(impl_->endpoint.address(), impl_->endpoint.port());
}

void HttpServer::stop() { impl_->stop(); }

}  // namespace durable::ops
