// SPDX-License-Identifier: Apache-2.0
#pragma once
// A small HTTP/1.1 server on Boost.Beast that hands each request to one handler function. It
// knows nothing of runs: the /v1 routes are written on top of it. Boost stays out of this header.

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace durable::ops {

/// One request as the handler sees it. The path and query are percent-decoded; a request whose
/// target does not decode never reaches the handler (it gets 400).
struct HttpRequest {
  std::string method;                        ///< "GET", "POST", ...
  std::string path;                          ///< decoded path without the query: "/v1/runs/abc"
  std::map<std::string, std::string> query;  ///< decoded query parameters (the last one wins)
  std::string body;
  std::string content_type;   ///< the Content-Type header, as sent; empty when absent
  std::string traceparent;    ///< the W3C traceparent header, as sent; empty when absent
  std::string last_event_id;  ///< Server-Sent Events' Last-Event-ID header; empty when absent
};

/// What the handler answers; sent as given. The server sets Content-Length and Connection itself.
struct HttpResponse {
  int status = 200;  ///< 100..599; anything else is a handler bug and is answered with 500
  std::string content_type = "application/json";
  std::string body;
  /// Extra headers, sent in this order. A name or value holding CR or LF is a handler bug and is
  /// answered with 500.
  std::vector<std::pair<std::string, std::string>> headers;
  /// Set by a handler that answers later (a long wait): the server sends nothing for this
  /// response and calls `later` once, on the handler thread, with `reply` and `post`. `reply`
  /// sends the real response when called, from any thread, once (later calls do nothing);
  /// `post` runs a task on a handler thread (for work that may block, such as a read of the
  /// database). The handler thread and the connection's io thread are free meanwhile. Once the
  /// server stops, both do nothing. The checks of a response (status, headers) apply to the
  /// real one.
  using Reply = std::function<void(HttpResponse)>;
  using Post = std::function<void(std::function<void()>)>;
  std::function<void(Reply reply, Post post)> later{};

  /// What a streamed response writes with (see `stream`).
  struct Chunks {
    /// Sends `data` as the next piece of the body, then calls `sent` once, on a thread of the
    /// server's: true once written, false when the client is gone or the server stopped (and at
    /// once, on the caller's thread, when the response has ended). One write at a time: the next
    /// one after `sent`. Callable from any thread.
    std::function<void(std::string data, std::function<void(bool)> sent)> write;
    /// Ends the response; the connection closes after it. Once; later writes send nothing.
    std::function<void()> end;
    Post post;  ///< as for `later`
  };
  /// Set by a handler that answers with a stream (Server-Sent Events): the server sends the
  /// status and headers of this response at once, with chunked transfer encoding and no body
  /// of its own, then calls `stream` once, on the handler thread. Neither a handler thread nor
  /// an io thread is held between writes. A HEAD request gets the head alone.
  std::function<void(Chunks chunks)> stream{};
};

/// Called once per request, on one of the server's handler threads (HttpOptions::handler_threads),
/// possibly on several at once: it must be safe to call concurrently. An exception it throws is
/// answered with 500 (code internal, its what() as the message) and the server keeps serving.
/// While it runs, the io threads go on accepting, reading and answering other connections; a
/// handler that blocks holds up its own request and, once every handler thread is busy, the
/// requests queued behind it.
using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpOptions {
  /// What to bind: "127.0.0.1", "localhost" (binds 127.0.0.1), "::1", "0.0.0.0", "::", an IP
  /// address of this host. No name is looked up.
  std::string address = "127.0.0.1";
  unsigned short port = 8080;  ///< 0: an ephemeral port (see HttpServer::port())
  /// The bearer token: empty (none), or visible ASCII, '!' to '~' (no space, no control
  /// character). A token or a signing_secret is required when the address is not loopback
  /// (127.0.0.0/8, ::1, localhost). When either is set, every request but a GET or HEAD with no
  /// body to one of public_paths needs `Authorization: Bearer <token>` or a signature.
  std::string token{};
  /// The shared secret of signed requests (runtime/http_signing.hpp; docs/operations.md): empty
  /// (none), or at least 32 bytes. A request signed with it needs no token.
  std::string signing_secret{};
  /// How far a signed request's timestamp may be from this host's clock, either way; within
  /// it, a signature is accepted once.
  std::chrono::seconds signature_window{300};
  /// Signatures remembered within the window (about 70 bytes each); past this many, signed
  /// requests get 503 too_many_signatures until the oldest expire.
  std::size_t max_signatures = 500'000;
  /// TLS: the PEM file of the certificate chain (the server's certificate first) and the PEM
  /// file of its private key; both or neither. When set, every connection is TLS 1.2 or later,
  /// url() says https, and a client that speaks plain HTTP gets 400 in plain text.
  std::string tls_cert_file{};
  std::string tls_key_file{};
  std::size_t max_body = 1 << 20;  ///< larger request bodies get 413
  int threads = 2;                 ///< io threads (at least one)
  /// Paths (decoded, exact match) served without credentials: the dashboard page holds no data.
  std::vector<std::string> public_paths = {"/"};
  /// A connection is closed when no complete request arrives within this time after it opens
  /// or after its last response (the keep-alive idle timeout); it also bounds reading one
  /// request and writing one response, so a slow client cannot hold a connection forever.
  std::chrono::milliseconds idle_timeout{30'000};
  /// Open connections served at once. One more is answered 503 too_many_connections (with
  /// Retry-After) and closed, so that idle clients cannot use up the process's file descriptors.
  std::size_t max_connections = 256;
  /// The request line and headers of one request, in bytes; more gets 431 header_too_large.
  std::size_t max_header = 16 * 1024;
  /// Request-body bytes the whole server holds at once (being read or handled); a request whose
  /// body would go over it gets 503 too_many_bodies before its body is read. A body of unknown
  /// length (chunked) counts as max_body.
  std::size_t max_body_bytes_in_flight = std::size_t{64} << 20;
  /// Threads that call the handler (at least one), apart from the io threads.
  int handler_threads = 8;
  /// Responses to a GET or HEAD with no body of these paths (decoded, exact match), sent by the
  /// io threads without calling the handler: pages that hold no data, such as the dashboard, so
  /// that they load even while every handler thread waits on the database. The token and the
  /// other checks apply as to any request.
  std::map<std::string, HttpResponse> static_responses{};
};

/// A JSON error as every error of this API reads: {"error": {"code": ..., "message": ...}}, and
/// "id" too when one of durable's errors is behind it: its durable::Error::code(), the stable id
/// docs/errors.md explains. The routes use it too, so that all errors share one shape.
HttpResponse json_error(int status, std::string code, std::string message,
                        std::string_view id = {});

/// Serves HTTP/1.0 and 1.1 (keep-alive, chunked request bodies, Expect: 100-continue), over TLS
/// when configured, until stopped. Errors it answers itself, all as json_error: 400 bad_request
/// (malformed HTTP, a target that does not decode), 401 unauthorized (with `WWW-Authenticate:
/// Bearer` and/or `Durable-Signature`: no credentials, wrong ones, a stale or replayed
/// signature, one that does not match the body), 403 forbidden (a browser request from another
/// site: an Origin other than http:// (https:// with TLS) and this server's Host, or, on a loopback
/// address, a Host that is not exactly a loopback name with an optional port, as DNS rebinding
/// makes it), 413 payload_too_large, 431 header_too_large, 500 internal (the handler threw), 503
/// too_many_connections, too_many_bodies and too_many_signatures (with `Retry-After`). The target,
/// Host, Origin and token, or the signature's form and timestamp (and that it was not used
/// before), are checked on the header, before any body byte is read or `100 Continue` is sent (a
/// signature's digest, which covers the body, once the body is read, before the handler is called);
/// a request refused with a body still unread is answered and its connection closed. Every response
/// carries `X-Frame-Options: DENY`, `Content-Security-Policy: frame-ancestors 'none'` and
/// `X-Content-Type-Options: nosniff` (set by the server, over any the handler sets), so no other
/// site can frame a page of it.
///
/// Threading: the constructor starts HttpOptions::threads io threads, which accept connections,
/// read requests and send responses, and HttpOptions::handler_threads handler threads, which
/// call the handler; it returns once the server listens. stop() may be called from any thread,
/// any number of times. Called from a thread other than the server's own, it returns after the
/// io threads have ended, every handler call running has returned (it waits for a handler
/// blocked on the database; a request still queued is dropped without calling the handler), the
/// listening socket and every connection are closed, and no handler call will start. Called
/// from inside the handler, it only makes the io threads end and keeps any handler call from
/// starting (the calls running go on and their responses are dropped); the destructor finishes
/// the job. The destructor stops; it must not run on a
/// server thread (not from inside the handler) and never throws. port() and url() may be called
/// from any thread.
class HttpServer {
 public:
  /// Binds, listens and starts serving. Throws durable::Error for a token or signing secret that
  /// is not valid, a non-loopback address without either, an address that does not parse, a TLS
  /// certificate or key that cannot be read or do not match (the message names the file), or an
  /// address and port it cannot listen on (in use, not local; the message names them).
  HttpServer(HttpOptions options, HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// The bound port (the ephemeral one chosen when HttpOptions::port was 0).
  unsigned short port() const;
  /// Where the server listens: "http://127.0.0.1:PORT", "http://[::1]:PORT", "https://..." with
  /// TLS.
  std::string url() const;
  /// Stops serving; see the threading contract above. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace durable::ops
