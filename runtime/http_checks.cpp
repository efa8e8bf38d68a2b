// SPDX-License-Identifier: Apache-2.0
#include "http_checks.hpp"

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <boost/beast/core/string.hpp>

#include "serialization.hpp"

namespace durable::ops::detail {

namespace {

// %XX decoded; '+' is a space only in the query. nullopt for a '%' not followed by two hex digits,
// and for a result that is not UTF-8 or holds a NUL: no name or id durable stores is that.
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
      const int high = durable::detail::hex_digit(text[i + 1]);
      const int low = durable::detail::hex_digit(text[i + 2]);
      if (high < 0 || low < 0) return std::nullopt;
      out += static_cast<char>(high * 16 + low);
      i += 2;
    }
  }
  if (!durable::detail::is_utf8(out)) return std::nullopt;
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

// The name of a Host header, "name[:port]" or "[v6][:port]", or nullopt when anything but a
// numeric port follows the name: "127.0.0.1:8080 evil" names no host this server answers to.
std::optional<std::string_view> host_name(std::string_view host) {
  std::size_t name_end = 0;
  if (!host.empty() && host.front() == '[') {
    name_end = host.find(']');
    if (name_end == std::string_view::npos) return std::nullopt;
    ++name_end;
  } else {
    name_end = std::min(host.find(':'), host.size());
  }
  std::string_view port = host.substr(name_end);
  if (!port.empty()) {
    if (port.front() != ':') return std::nullopt;
    port.remove_prefix(1);
    if (port.empty() || port.size() > 5) return std::nullopt;
    if (!std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
    if (std::stoul(std::string(port)) > 65535) return std::nullopt;
  }
  return host.substr(0, name_end);
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  return boost::beast::iequals(boost::beast::string_view(a.data(), a.size()),
                               boost::beast::string_view(b.data(), b.size()));
}

// Only the origin form ("/path?query") is served: no proxy (absolute) or OPTIONS (*) forms.
bool decode_target(std::string_view target, std::string& path,
                   std::map<std::string, std::string>& query) {
  if (target.empty() || target.front() != '/') return false;
  const auto question = target.find('?');
  auto decoded = percent_decode(target.substr(0, question), false);
  if (!decoded) return false;
  path = std::move(*decoded);
  return question == std::string_view::npos || decode_query(target.substr(question + 1), query);
}

std::optional<std::string> invalid_token(std::string_view token) {
  const bool visible = std::all_of(token.begin(), token.end(), [](char c) {
    return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
  if (visible) return std::nullopt;
  // The token itself is a secret: say what is wrong with it, not what it is.
  return "the HTTP bearer token (" + std::to_string(token.size()) +
         (token.size() == 1 ? " character" : " characters") +
         ") holds a space, a control character or a byte that is not ASCII; a token "
         "is one or more visible ASCII characters ('!' to '~'), as sent in 'Authorization: "
         "Bearer <token>'";
}

namespace {

std::string needed_credentials(const HttpOptions& options) {
  const std::string bearer = "'Authorization: Bearer <token>'";
  const std::string signed_request =
      "a signed request ('Authorization: " + std::string(kSignatureScheme) +
      " t=..., nonce=..., sig=...', see docs/operations.md)";
  if (options.signing_secret.empty()) return "the header " + bearer;
  if (options.token.empty()) return signed_request;
  return "the header " + bearer + " or " + signed_request;
}

}  // namespace

std::optional<std::string> refuse_credentials(const HttpOptions& options, const PublicRead& read,
                                              std::string_view authorization, std::int64_t now,
                                              std::optional<Signature>& signature) {
  signature.reset();
  if (options.token.empty() && options.signing_secret.empty()) return std::nullopt;
  const auto& open = options.public_paths;
  // Only a GET or HEAD with no body: anything else on a public path would have its body read,
  // and count against the bodies in flight, for a client without credentials.
  if (read.bodiless_get && std::find(open.begin(), open.end(), read.path) != open.end()) {
    return std::nullopt;
  }
  if (is_signature_header(authorization)) {
    if (options.signing_secret.empty()) {
      return "this server takes no signed requests (it has no signing secret): send " +
             needed_credentials(options);
    }
    std::string error;
    auto parsed = parse_signature(authorization, error);
    if (!parsed) return "the signature header is malformed: " + error;
    if (auto stale = refuse_timestamp(parsed->timestamp, now, options.signature_window)) {
      return stale;
    }
    signature = std::move(parsed);
    return std::nullopt;
  }
  constexpr std::string_view kScheme = "Bearer ";
  if (options.token.empty() || authorization.size() < kScheme.size() ||
      !iequals(authorization.substr(0, kScheme.size()), kScheme)) {
    return "this server needs " + needed_credentials(options);
  }
  std::string_view given = authorization.substr(kScheme.size());
  while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
  while (!given.empty() && given.back() == ' ') given.remove_suffix(1);
  if (!equal_in_constant_time(given, options.token)) return "the bearer token is wrong";
  return std::nullopt;
}

std::optional<std::string> refuse_signature(const HttpOptions& options, const Signature& signature,
                                            std::string_view method, std::string_view target,
                                            std::string_view body) {
  const std::string expected =
      hmac_sha256(options.signing_secret,
                  signed_text(method, target, signature.timestamp, signature.nonce, body));
  if (equal_in_constant_time(signature.digest, expected)) return std::nullopt;
  return "the signature does not match the request: sign the method, the target as sent (path "
         "and query), t, nonce and the body, one per line, with HMAC-SHA256 under the server's "
         "signing secret";
}

std::vector<std::string> challenges(const HttpOptions& options) {
  std::vector<std::string> out;
  if (!options.token.empty()) out.emplace_back("Bearer");
  if (!options.signing_secret.empty()) out.emplace_back(kSignatureScheme);
  return out;
}

bool is_loopback_name(std::string_view host) {
  if (iequals(host, "localhost")) return true;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  boost::system::error_code error;
  const auto address = boost::asio::ip::make_address(host, error);
  return !error && address.is_loopback();
}

// A page on another site can make the operator's browser send requests here (a form, a no-cors
// fetch), and, by rebinding its own name to 127.0.0.1, read the answers. Browsers say where a
// request comes from, so refuse: an Origin that is not this server's own page, and, on a loopback
// address, a Host that is not exactly a loopback name with an optional port. Clients that are not
// browsers send no Origin. The page's own origin is https:// when the server speaks TLS.
std::optional<std::string> refuse_cross_site(const HttpOptions& options, std::string_view host,
                                             std::string_view origin) {
  if (is_loopback_name(options.address) && !host.empty()) {
    const auto name = host_name(host);
    if (!name || !is_loopback_name(*name)) {
      return "the Host header '" + std::string(host) +
             "' does not name this loopback server: a page on another site cannot reach it";
    }
  }
  if (origin.empty()) return std::nullopt;
  const std::string_view own_scheme = options.tls_cert_file.empty() ? "http://" : "https://";
  const bool own = origin.size() > own_scheme.size() &&
                   iequals(origin.substr(0, own_scheme.size()), own_scheme) &&
                   iequals(origin.substr(own_scheme.size()), host);
  if (!own) {
    return "the request comes from another site (Origin '" + std::string(origin) +
           "'): the API answers only its own page (" + std::string(own_scheme) + std::string(host) +
           ") and clients that are not browsers";
  }
  return std::nullopt;
}

}  // namespace durable::ops::detail
