// SPDX-License-Identifier: Apache-2.0
// The HTTP server: one acceptor and one Session per connection, all on an io_context run by a few
// io threads. Each session lives on its own strand, so its handlers never run concurrently; its
// pending operations hold it (shared_from_this), and it ends when the last one completes.
//
// The io threads never call the handler: a whole request is posted to a pool of handler
// threads, and the response posted back to the session's strand. So a handler blocked on the
// database holds up its own request, while the io threads go on accepting, refusing (503, 401,
// 413) and answering. Each connection has at most one request in the pool (the next one is not
// read before the response is sent), so the queue is bounded by max_connections.
//
// What a client can make the server hold is bounded: max_connections sessions, a header of
// max_header bytes each, and request bodies of max_body each and max_body_bytes_in_flight in all.
// A body is read only once its header has passed every check (target, Host, Origin, token or a
// fresh signature) and its bytes are reserved: a body without a token or signature is never
// buffered; a signed one is, within those bounds, before its digest is checked. What is decided
// on a request apart from its connection (the checks, the answers the server gives itself, the
// message a response is sent as) is in http_messages.hpp; a session only sequences it, over
// plain TCP or TLS.
//
// Stopping does not ask sessions to finish: the io threads end, the handler pool finishes the
// calls running and drops the queued ones, then the io_context is destroyed, which destroys
// every pending operation and so every session, closing its socket. This is what makes stop()
// prompt whatever state a connection is in (idle, mid-request, mid-response).

#include "http_server.hpp"

#include <openssl/ssl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/detect_ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <cstdint>
#include <durable/errors.hpp>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>

#include "env.hpp"
#include "http_checks.hpp"
#include "http_messages.hpp"
#include "http_signing.hpp"

namespace durable::ops {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// How long a connection that is being closed (after an error response, or Connection: close)
// may keep sending before the socket is closed; see Session::linger.
constexpr std::chrono::milliseconds kLingerTime{1000};
// How long a TLS client has to send its hello and finish the handshake, apart from the idle
// timeout of its requests: a handshake costs the server a key operation, and a connection over
// max_connections is answered only after one.
constexpr std::chrono::milliseconds kHandshakeTime{5000};
// A pause before accepting again when accept fails (out of file descriptors): not a busy loop.
constexpr std::chrono::milliseconds kAcceptRetry{50};
// Connections over max_connections that are being answered 503 at once. Past this many, one
// more is closed without an answer: a flood must not hold a descriptor per refusal either.
constexpr std::size_t kMaxRefusing = 64;
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

// The server whose thread this is (io or handler), if any: stop() must not join the thread it
// runs on.
thread_local const void* serving_on_this_thread = nullptr;

// One unit of a counter the server bounds (connections, refusals, body bytes), given back when
// this is destroyed, whatever path the session or request ends by.
class Held {
 public:
  Held() = default;
  // Takes `amount` of `counter` if that keeps it at or under `limit`.
  static std::optional<Held> take(std::atomic<std::size_t>& counter, std::size_t amount,
                                  std::size_t limit) {
    std::size_t now = counter.load();
    do {
      if (amount > limit || now > limit - amount) return std::nullopt;
    } while (!counter.compare_exchange_weak(now, now + amount));
    Held held;
    held.counter_ = &counter;
    held.amount_ = amount;
    return held;
  }
  Held(Held&& other) noexcept
      : counter_(std::exchange(other.counter_, nullptr)), amount_(other.amount_) {}
  Held& operator=(Held&& other) noexcept {
    if (this != &other) {
      release();
      counter_ = std::exchange(other.counter_, nullptr);
      amount_ = other.amount_;
    }
    return *this;
  }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  ~Held() { release(); }
  void release() {
    if (counter_ != nullptr) counter_->fetch_sub(amount_);
    counter_ = nullptr;
  }

 private:
  std::atomic<std::size_t>* counter_ = nullptr;
  std::size_t amount_ = 0;
};

// What every session shares; owned by the server, which destroys every session before it.
struct Shared {
  HttpOptions options;
  HttpHandler handler;
  const void* server = nullptr;  // for serving_on_this_thread
  std::optional<asio::thread_pool> handler_pool;  // outside the Env: the HTTP edge's threads
  std::atomic<bool> stopping{false};
  std::atomic<std::size_t> connections{0};
  std::atomic<std::size_t> refusing{0};
  std::atomic<std::size_t> body_bytes{0};
  std::optional<asio::ssl::context> tls;          // set when the server speaks TLS
  std::optional<detail::ReplayGuard> signatures;  // set when it takes signed requests
  // Sessions whose response comes later (HttpResponse::later), held here until their reply: a
  // reply may outlive the server, so it reaches them only through this, which stop() closes.
  struct Parked {
    std::mutex mutex;
    bool closed = false;
    std::map<const void*, std::shared_ptr<void>> sessions;
  };
  std::shared_ptr<Parked> parked = std::make_shared<Parked>();
};

using detail::is_malformed;
using detail::malformed;
using detail::overloaded;
using detail::replayed;
using detail::to_message;
using detail::to_std;

// ---- Requests to responses -----------------------------------------------------------------

HttpResponse call_handler(const HttpHandler& handler, const HttpRequest& request) {
  try {
    return handler(request);
  } catch (const Error& error) {
    return json_error(500, "internal", error.what(), error.code());
  } catch (const std::exception& error) {
    return json_error(500, "internal", error.what());
  } catch (...) {
    return json_error(500, "internal", "the handler threw something that is not a std::exception");
  }
}

// On a handler thread. nullopt once the server stops: no handler call starts after that.
std::optional<HttpResponse> handle(Shared& shared, const HttpRequest& request) {
  if (shared.stopping) return std::nullopt;
  serving_on_this_thread = shared.server;
  HttpResponse response = call_handler(shared.handler, request);
  serving_on_this_thread = nullptr;
  return response;
}

// ---- One connection ------------------------------------------------------------------------

// A connection over plain TCP (PlainStream) or TLS (TlsStream): the same requests, read and
// answered the same way; only the start (the TLS handshake) and the close differ.
template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

 public:
  Session(tcp::socket socket, Shared& shared, Held slot)
      : stream_(make_stream(std::move(socket), shared)), shared_(shared), slot_(std::move(slot)) {}

  // refuse: a connection over max_connections, answered 503 (after the handshake, with TLS)
  // before anything is read, then closed.
  void start(bool refuse) {
    asio::dispatch(stream_.get_executor(), [self = this->shared_from_this(), refuse] {
      if constexpr (kTls) {
        self->detect_tls(refuse);
      } else {
        self->begin(refuse);
      }
    });
  }

 private:
  static Stream make_stream(tcp::socket socket, Shared& shared) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *shared.tls);
    } else {
      return Stream(std::move(socket));
    }
  }

  PlainStream& lowest() { return beast::get_lowest_layer(stream_); }

  void begin(bool refuse) {
    if (!refuse) return read_header();
    send(overloaded("too_many_connections",
                    "the server has " + std::to_string(shared_.options.max_connections) +
                        " connections open, its limit (max_connections); try again"),
         11, false, false);
  }

  // A client that speaks plain HTTP to a TLS port is told so in plain text, rather than left
  // with a failed handshake it cannot read; then the handshake goes on from the bytes read.
  void detect_tls(bool refuse) {
    lowest().expires_after(std::min(shared_.options.idle_timeout, kHandshakeTime));
    beast::async_detect_ssl(
        lowest(), buffer_,
        [self = this->shared_from_this(), refuse](beast::error_code error, bool tls) {
          if (error) return self->close();
          if (!tls) return self->refuse_plain();
          self->stream_.async_handshake(
              asio::ssl::stream_base::server, self->buffer_.data(),
              [self, refuse](beast::error_code handshake_error, std::size_t used) {
                if (handshake_error) return self->close();
                self->buffer_.consume(used);
                self->begin(refuse);
              });
        });
  }

  void refuse_plain() {
    plain_ = true;
    response_ = to_message(detail::plain_http_refused(), 11, false, false);
    http::async_write(lowest(), response_,
                      [self = this->shared_from_this()](beast::error_code error, std::size_t) {
                        if (error) return self->close();
                        self->linger();
                      });
  }

  // The header first, so that it is checked before the body is read, a body over the limit is
  // refused unread, and a client waiting for 100 Continue gets it only once it may go on.
  void read_header() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(
        shared_.options.max_header, std::numeric_limits<std::uint32_t>::max())));
    parser_->body_limit(shared_.options.max_body);
    request_ = HttpRequest{};
    lowest().expires_after(shared_.options.idle_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](
                                beast::error_code error, std::size_t) { self->on_header(error); });
  }

  void on_header(beast::error_code error) {
    if (error) return on_read_error(error);
    const auto& header = parser_->get();
    if (auto refusal = detail::refuse_header(shared_.options, header, request_, signature_)) {
      return refuse_request(std::move(*refusal));
    }
    // A replay known already is refused unread; a new signature is checked once read.
    if (signature_ && shared_.signatures->holds(signature_->digest)) {
      return refuse_request(replayed(shared_.options));
    }
    if (!parser_->is_done()) {
      // A body of unknown length (chunked) may grow to max_body.
      const std::size_t size = parser_->content_length()
                                   ? static_cast<std::size_t>(*parser_->content_length())
                                   : shared_.options.max_body;
      auto bytes = Held::take(shared_.body_bytes, size, shared_.options.max_body_bytes_in_flight);
      if (!bytes) {
        return refuse_request(
            overloaded("too_many_bodies",
                       "the server is reading as many request-body bytes as it may hold "
                       "at once (max_body_bytes_in_flight); try again"));
      }
      body_bytes_ = std::move(*bytes);
    }
    const bool expects_continue = header.version() == 11 && !parser_->is_done() &&
                                  beast::iequals(header[http::field::expect], "100-continue");
    if (!expects_continue) return read_body();
    asio::async_write(
        stream_, asio::buffer(kContinue.data(), kContinue.size()),
        [self = this->shared_from_this()](beast::error_code write_error, std::size_t) {
          if (write_error) return self->close();
          self->read_body();
        });
  }

  // Refused on its header: a request without a body keeps the connection as it asked; one with
  // a body unread closes it, the body discarded by linger(), never buffered.
  void refuse_request(HttpResponse response) {
    const auto& header = parser_->get();
    const bool keep_alive = parser_->is_done() && header.keep_alive();
    send(std::move(response), header.version(), keep_alive, header.method() == http::verb::head);
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code error, std::size_t) {
                       self->on_request(error);
                     });
  }

  void on_request(beast::error_code error) {
    if (error) return on_read_error(error);
    auto& message = parser_->get();
    const bool head = message.method() == http::verb::head;
    if (signature_) {
      if (auto refusal =
              detail::refuse_signed(shared_.options, *shared_.signatures, *signature_, message)) {
        return send(std::move(*refusal), message.version(), message.keep_alive(), head);
      }
    }
    request_.body = std::move(message.body());
    if (const HttpResponse* page = detail::static_response(shared_.options, message, request_)) {
      return send(*page, message.version(), message.keep_alive(), head);
    }
    hand_off(message.version(), message.keep_alive(), head);
  }

  // To a handler thread, and the response back to this session's strand. The task holds the
  // session, its request and its body bytes until the handler returns; once the server stops,
  // the pool drops it unrun (see handle()).
  void hand_off(unsigned version, bool keep_alive, bool head) {
    auto task = [self = this->shared_from_this(), request = std::move(request_),
                 bytes = std::move(body_bytes_), version, keep_alive, head]() mutable {
      std::optional<HttpResponse> response = handle(self->shared_, request);
      request = HttpRequest{};
      bytes.release();
      if (!response) return;
      if (response->later)
        return answer_later(std::move(self), std::move(*response), version, keep_alive, head);
      if (response->stream && !head && response->status == 200)
        return answer_streamed(std::move(self), std::move(*response), version);
      const auto executor = self->stream_.get_executor();
      asio::post(executor,
                 [self = std::move(self), response = std::move(*response), version, keep_alive,
                  head]() mutable { self->send(std::move(response), version, keep_alive, head); });
    };
    asio::post(*shared_.handler_pool, std::move(task));
  }

  // HttpResponse::later: the reply, called once from any thread, sends on this session's strand.
  static void answer_later(std::shared_ptr<Session> self, HttpResponse deferred, unsigned version,
                           bool keep_alive, bool head) {
    const std::shared_ptr<Shared::Parked> parked = self->shared_.parked;
    Shared& self_shared = self->shared_;
    const void* key = self.get();
    {
      std::lock_guard lock(parked->mutex);
      if (parked->closed) return;
      parked->sessions[key] = self;
    }
    self.reset();
    HttpResponse::Reply reply = [parked, key, version, keep_alive, head](HttpResponse response) {
      std::shared_ptr<Session> session;
      {
        std::lock_guard lock(parked->mutex);
        const auto it = parked->sessions.find(key);
        if (parked->closed || it == parked->sessions.end()) return;  // replied, or stopped
        session = std::static_pointer_cast<Session>(it->second);
        parked->sessions.erase(it);
      }
      const auto executor = session->stream_.get_executor();
      asio::post(executor,
                 [session, response = std::move(response), version, keep_alive, head]() mutable {
                   session->send(std::move(response), version, keep_alive, head);
                 });
    };
    Shared* shared = &self_shared;
    HttpResponse::Post post = [parked, shared](std::function<void()> task) {
      std::lock_guard lock(parked->mutex);  // while open, the pool is there (stop() closes first)
      if (!parked->closed && shared->handler_pool)
        asio::post(*shared->handler_pool, std::move(task));
    };
    deferred.later(std::move(reply), std::move(post));
  }

  // HttpResponse::stream: the head now, then the handler's chunks, each written on this
  // session's strand; the session is held in `parked` meanwhile, where stop() finds it.
  static void answer_streamed(std::shared_ptr<Session> self, HttpResponse response,
                              unsigned version) {
    const std::shared_ptr<Shared::Parked> parked = self->shared_.parked;
    const void* key = self.get();
    {
      std::lock_guard lock(parked->mutex);
      if (parked->closed) return;
      parked->sessions[key] = self;
    }
    auto find = [parked, key](bool take) -> std::shared_ptr<Session> {
      std::lock_guard lock(parked->mutex);
      const auto it = parked->sessions.find(key);
      if (parked->closed || it == parked->sessions.end()) return nullptr;  // ended, or stopped
      auto session = std::static_pointer_cast<Session>(it->second);
      if (take) parked->sessions.erase(it);
      return session;
    };
    HttpResponse::Chunks chunks;
    chunks.write = [find](std::string data, std::function<void(bool)> sent) {
      const std::shared_ptr<Session> session = find(false);
      if (!session) return sent(false);
      asio::post(session->stream_.get_executor(),
                 [session, data = std::move(data), sent = std::move(sent)]() mutable {
                   session->write_chunk(std::move(data), std::move(sent));
                 });
    };
    chunks.end = [find] {
      if (const std::shared_ptr<Session> session = find(true)) {
        asio::post(session->stream_.get_executor(), [session] { session->end_chunks(); });
      }
    };
    Shared* shared = &self->shared_;
    chunks.post = [parked, shared](std::function<void()> task) {
      std::lock_guard lock(parked->mutex);  // while open, the pool is there (stop() closes first)
      if (!parked->closed && shared->handler_pool)
        asio::post(*shared->handler_pool, std::move(task));
    };
    response.body.clear();
    // The handler's stream begins once the head is written, on a handler thread.
    auto begin = [stream = std::move(response.stream), chunks]() mutable {
      chunks.post([stream = std::move(stream), chunks]() mutable { stream(std::move(chunks)); });
    };
    auto give_up = [find] { find(true); };
    http::response<http::string_body> checked =
        to_message(std::move(response), version, false, false);
    asio::post(self->stream_.get_executor(),
               [self, checked = std::move(checked), begin = std::move(begin), give_up]() mutable {
                 if (checked.result_int() != 200) {  // the checks of a response refused it
                   give_up();
                   return self->send_message(std::move(checked));
                 }
                 self->write_head(std::move(checked), std::move(begin), std::move(give_up));
               });
  }

  void write_head(http::response<http::string_body> checked, std::function<void()> begin,
                  std::function<void()> give_up) {
    streamed_.emplace(std::move(checked.base()));
    streamed_->erase(http::field::content_length);
    // HTTP/1.0 knows no chunks: the body is the bytes up to the close (the response says close).
    streamed_->chunked(streamed_->version() >= 11);
    head_writer_.emplace(*streamed_);
    lowest().expires_after(shared_.options.idle_timeout);
    http::async_write_header(stream_, *head_writer_,
                             [self = this->shared_from_this(), begin = std::move(begin),
                              give_up = std::move(give_up)](beast::error_code error, std::size_t) {
                               if (!error) return begin();
                               give_up();
                               self->close();
                             });
  }

  void write_chunk(std::string data, std::function<void(bool)> sent) {
    auto held = std::make_shared<std::string>(std::move(data));
    lowest().expires_after(shared_.options.idle_timeout);
    auto written = [self = this->shared_from_this(), held, sent = std::move(sent)](
                       beast::error_code error, std::size_t) {
      if (error) self->close();
      sent(!error);
    };
    if (!streamed_->chunked()) return asio::async_write(stream_, asio::buffer(*held), written);
    asio::async_write(stream_, http::make_chunk(asio::buffer(*held)), std::move(written));
  }

  void end_chunks() {
    if (!streamed_->chunked()) return linger();  // HTTP/1.0: the close ends the body
    lowest().expires_after(shared_.options.idle_timeout);
    asio::async_write(stream_, http::make_chunk_last(),
                      [self = this->shared_from_this()](beast::error_code error, std::size_t) {
                        if (error) return self->close();
                        self->linger();
                      });
  }

  // After a malformed request the stream is lost (where would the next request begin?), so the
  // error is answered and the connection closed.
  void on_read_error(beast::error_code error) {
    if (!is_malformed(error)) return close();
    send(malformed(error, shared_.options), 11, false, false);
  }

  void send(HttpResponse response, unsigned version, bool keep_alive, bool head) {
    send_message(to_message(std::move(response), version, keep_alive, head));
  }

  void send_message(http::response<http::string_body> message) {
    response_ = std::move(message);
    lowest().expires_after(shared_.options.idle_timeout);
    http::async_write(stream_, response_,
                      [self = this->shared_from_this()](beast::error_code error, std::size_t) {
                        if (error) return self->close();
                        if (self->response_.keep_alive()) return self->read_header();
                        self->linger();
                      });
  }

  // Closing a socket with unread input makes the kernel send a reset, which can destroy the
  // response before the client reads it (a 413 while the client still sends its body). So:
  // send FIN, then read and discard until the client closes too, for at most kLingerTime. Over
  // TLS, the close_notify alert goes first, with kLingerTime of its own (a client that sends
  // none until then has its socket closed without the FIN).
  void linger() {
    body_bytes_.release();
    lowest().expires_after(kLingerTime);
    if constexpr (kTls) {
      if (!plain_) {
        plain_ = true;  // the TLS layer is done with: what follows is raw TCP
        return stream_.async_shutdown(
            [self = this->shared_from_this()](beast::error_code) { self->linger(); });
      }
    }
    beast::error_code ignored;
    lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    discard();
  }

  void discard() {
    lowest().async_read_some(asio::buffer(discarded_), [self = this->shared_from_this()](
                                                           beast::error_code error, std::size_t) {
      if (error) return self->close();
      self->discard();
    });
  }

  void close() {
    beast::error_code ignored;
    lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    lowest().close();
  }

  Stream stream_;
  Shared& shared_;
  Held slot_;  // this connection's place in connections (or refusing)
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;  // a fresh one per request
  HttpRequest request_;                         // decoded from the header; its body once read
  std::optional<detail::Signature> signature_;  // a signed request's, checked once read
  Held body_bytes_;                             // the body's share of max_body_bytes_in_flight
  http::response<http::string_body> response_;  // kept alive while written
  // A streamed response's head, and what writes it (kept alive while written).
  std::optional<http::response<http::empty_body>> streamed_;
  std::optional<http::response_serializer<http::empty_body>> head_writer_;
  bool plain_ = false;  // TLS only: the connection speaks raw TCP from now on (see linger())
  std::array<char, 4096> discarded_;
};

tcp::endpoint endpoint_to_bind(const HttpOptions& options) {
  if (const auto invalid = detail::invalid_token(options.token))
    throw Error(errc::config, *invalid);
  if (const auto invalid = detail::invalid_signing_secret(options.signing_secret)) {
    throw Error(errc::config, *invalid);
  }
  beast::error_code error;
  const asio::ip::address address = options.address == "localhost"
                                        ? asio::ip::address(asio::ip::address_v4::loopback())
                                        : asio::ip::make_address(options.address, error);
  if (error) {
    throw Error(
        errc::config,
        "cannot serve HTTP on '" + options.address +
            "': not an IP address; use 127.0.0.1, ::1, localhost, 0.0.0.0, :: or an address "
            "of this host");
  }
  if (!address.is_loopback() && options.token.empty() && options.signing_secret.empty()) {
    throw Error(errc::config,
                "refusing to serve HTTP on " + options.address +
                    " without a token: anyone who can reach it could start and cancel runs; set a "
                    "bearer token or a signing secret, or bind a loopback address (127.0.0.1)");
  }
  return {address, options.port};
}

// The TLS context of HttpOptions::tls_cert_file and tls_key_file: TLS 1.2 and later only.
asio::ssl::context tls_context(const HttpOptions& options) {
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    throw Error(errc::config,
                "TLS needs both a certificate file and a key file (--tls-cert and --tls-key); "
                "only the " +
                    std::string(options.tls_cert_file.empty() ? "key" : "certificate") +
                    " file was given");
  }
  asio::ssl::context context(asio::ssl::context::tls_server);
  context.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                      asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                      asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
  beast::error_code error;
  context.use_certificate_chain_file(options.tls_cert_file, error);
  if (error) {
    throw Error(errc::config,
                "cannot serve HTTPS: the certificate file '" + options.tls_cert_file +
                    "' cannot be read as a PEM certificate chain: " + error.message());
  }
  context.use_private_key_file(options.tls_key_file, asio::ssl::context::pem, error);
  if (!error && SSL_CTX_check_private_key(context.native_handle()) != 1) {
    error = asio::error::invalid_argument;
  }
  if (error) {
    throw Error(
        errc::config,
        "cannot serve HTTPS: the key file '" + options.tls_key_file +
            "' cannot be read as a PEM private key, or it is not the key of the certificate '" +
            options.tls_cert_file + "': " + error.message());
  }
  return context;
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
  throw Error(errc::listen, message);
}

}  // namespace

HttpResponse json_error(int status, std::string code, std::string message, std::string_view id) {
  nlohmann::json body = {{"error", {{"code", std::move(code)}, {"message", std::move(message)}}}};
  if (!id.empty()) body["error"]["id"] = id;
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

  Shared shared;
  // Reset in this order by stop(), once no io thread runs: the io_context last.
  std::optional<asio::io_context> io;
  std::optional<tcp::acceptor> acceptor;
  std::optional<asio::steady_timer> accept_retry;
  tcp::endpoint endpoint;
  std::vector<std::thread> threads;
  std::mutex stop_mutex;
  bool stopped = false;  // guarded by stop_mutex
};

HttpServer::Impl::Impl(HttpOptions options, HttpHandler handler) {
  shared.options = std::move(options);
  shared.handler = std::move(handler);
  shared.server = this;
  const tcp::endpoint wanted = endpoint_to_bind(shared.options);
  if (!shared.options.tls_cert_file.empty() || !shared.options.tls_key_file.empty()) {
    shared.tls.emplace(tls_context(shared.options));
  }
  if (!shared.options.signing_secret.empty()) {
    shared.signatures.emplace(shared.options.max_signatures);
  }
  const int thread_count = std::max(1, shared.options.threads);
  io.emplace(thread_count);
  acceptor.emplace(*io);
  accept_retry.emplace(*io);
  listen(*acceptor, wanted);
  endpoint = acceptor->local_endpoint();
  accept();
  try {
    shared.handler_pool.emplace(
        static_cast<std::size_t>(std::max(1, shared.options.handler_threads)));
    for (int i = 0; i < thread_count; ++i) {
      threads.push_back(durable::detail::Env::system().start_thread([this] { run_io(); }));
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

// Accepts again at once, whatever happens to this connection: a refusal does not wait for the
// refused client, and a flood of them does not starve the connections that fit.
void HttpServer::Impl::on_accept(beast::error_code error, tcp::socket socket) {
  if (error == asio::error::operation_aborted) return;
  if (error) {
    accept_retry->expires_after(kAcceptRetry);
    accept_retry->async_wait([this](beast::error_code wait_error) {
      if (!wait_error) accept();
    });
    return;
  }
  std::optional<Held> slot = Held::take(shared.connections, 1, shared.options.max_connections);
  const bool refuse = !slot;
  if (refuse) slot = Held::take(shared.refusing, 1, kMaxRefusing);
  if (!slot) {
    // The socket closes here, unanswered.
  } else if (shared.tls) {
    std::make_shared<Session<TlsStream>>(std::move(socket), shared, std::move(*slot))
        ->start(refuse);
  } else {
    std::make_shared<Session<PlainStream>>(std::move(socket), shared, std::move(*slot))
        ->start(refuse);
  }
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
  shared.stopping = true;  // before anything else: no handler call starts from now on
  if (serving_on_this_thread == this) {
    io->stop();
    return;
  }
  std::lock_guard lock(stop_mutex);
  if (stopped) return;
  io->stop();
  for (auto& thread : threads) thread.join();
  {
    // Before the pool goes: a late reply or post finds the parked sessions closed.
    std::map<const void*, std::shared_ptr<void>> parked;  // destroyed outside the lock
    {
      std::lock_guard parked_lock(shared.parked->mutex);
      shared.parked->closed = true;
      parked.swap(shared.parked->sessions);
    }
  }
  if (shared.handler_pool) {
    shared.handler_pool->stop();  // queued requests are dropped unrun
    shared.handler_pool->join();  // the handler calls running return
  }
  shared.handler_pool.reset();  // destroys the dropped tasks, with the sessions they held
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
  return std::string(impl_->shared.tls ? "https://" : "http://") +
         host_and_port(impl_->endpoint.address(), impl_->endpoint.port());
}

void HttpServer::stop() { impl_->stop(); }

}  // namespace durable::ops
