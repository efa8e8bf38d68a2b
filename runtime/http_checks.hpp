// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the HTTP server checks on a request's header before it reads a body byte or calls the
// handler: the target decodes, the browser request comes from this server's own page, the
// token is right or the signature well formed and fresh (its digest, which covers the body, is
// checked once the body is read). Pure functions of the text, so that each rule reads on its own.
// Internal to runtime/; the server's contract is in http_server.hpp.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http_server.hpp"
#include "http_signing.hpp"

namespace durable::ops::detail {

/// ASCII case-insensitive equality, as HTTP compares header names, schemes and host names.
bool iequals(std::string_view a, std::string_view b);

/// Decodes an origin-form target ("/path?query"): the percent-decoded path and query. False
/// for any other form (absolute, "*") or a '%' not followed by two hex digits.
bool decode_target(std::string_view target, std::string& path,
                   std::map<std::string, std::string>& query);

/// Why `token` cannot be a bearer token (nullopt when it can, or when it is empty: no token).
/// A token is visible ASCII, '!' to '~': no space, tab or control character, which a header
/// would mangle or a shell quote would hide.
std::optional<std::string> invalid_token(std::string_view token);

/// What decides whether a request may skip the credentials: its path, and whether it is a GET or
/// HEAD that carries no body (no Content-Length above 0, not chunked).
struct PublicRead {
  const std::string& path;
  bool bodiless_get = false;
};

/// nullopt when the request may go on; otherwise why it gets 401. Only a bodiless GET or HEAD
/// of one of HttpOptions::public_paths goes on without credentials. The credentials are the
/// bearer token (HttpOptions::token) or a signature (HttpOptions::signing_secret): a signed
/// request whose form and timestamp (against `now`, Unix seconds) pass goes on with `signature`
/// set, and its digest is checked once its body has been read (refuse_signature).
std::optional<std::string> refuse_credentials(const HttpOptions& options, const PublicRead& read,
                                              std::string_view authorization, std::int64_t now,
                                              std::optional<Signature>& signature);

/// nullopt when `signature` is the HMAC of this request under HttpOptions::signing_secret;
/// otherwise why it gets 401. `target` is the request target as sent, before decoding.
std::optional<std::string> refuse_signature(const HttpOptions& options, const Signature& signature,
                                            std::string_view method, std::string_view target,
                                            std::string_view body);

/// The WWW-Authenticate challenges of a 401: one per kind of credential the server takes.
std::vector<std::string> challenges(const HttpOptions& options);

/// True for "localhost", an IPv4 loopback address and "[::1]" (brackets optional), nothing more.
bool is_loopback_name(std::string_view host);

/// nullopt when the request may go on; otherwise why it gets 403 (a browser on another site).
std::optional<std::string> refuse_cross_site(const HttpOptions& options, std::string_view host,
                                             std::string_view origin);

}  // namespace durable::ops::detail
