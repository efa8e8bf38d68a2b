// SPDX-License-Identifier: Apache-2.0
#include "http_signing.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <durable/errors.hpp>

#include "http_checks.hpp"
#include "serialization.hpp"

namespace durable::ops::detail {

namespace {

constexpr std::size_t kDigestBytes = 32;
constexpr std::size_t kMinNonce = 16;
constexpr std::size_t kMaxNonce = 64;

bool nonce_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

constexpr std::string_view kForm =
    "t=<unix seconds>, nonce=<16 to 64 of A-Z a-z 0-9 - _>, "
    "sig=<64 hex digits>";

}  // namespace

std::optional<std::string> invalid_signing_secret(std::string_view secret) {
  if (secret.empty() || secret.size() >= kMinSecretBytes) return std::nullopt;
  // The secret itself stays unsaid: only its length.
  return "the signing secret is " + std::to_string(secret.size()) +
         " bytes long; it must be at least " + std::to_string(kMinSecretBytes) +
         " (make one with: openssl rand -hex 32)";
}

bool is_signature_header(std::string_view authorization) {
  return authorization.size() > kSignatureScheme.size() &&
         iequals(authorization.substr(0, kSignatureScheme.size()), kSignatureScheme) &&
         authorization[kSignatureScheme.size()] == ' ';
}

std::optional<Signature> parse_signature(std::string_view authorization, std::string& error) {
  if (!is_signature_header(authorization)) {
    error = "the header does not begin with '" + std::string(kSignatureScheme) + " '";
    return std::nullopt;
  }
  std::string_view rest = authorization.substr(kSignatureScheme.size() + 1);
  std::optional<std::string_view> t, nonce, sig;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view field = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const auto equals = field.find('=');
    const std::string_view name = field.substr(0, std::min(equals, field.size()));
    std::optional<std::string_view>* slot = name == "t"       ? &t
                                            : name == "nonce" ? &nonce
                                            : name == "sig"   ? &sig
                                                              : nullptr;
    if (equals == std::string_view::npos || slot == nullptr || slot->has_value()) {
      error = "the signature's fields are " + std::string(kForm) + ", each once";
      return std::nullopt;
    }
    *slot = field.substr(equals + 1);
  }
  if (!t || !nonce || !sig) {
    error = "the signature needs all of " + std::string(kForm);
    return std::nullopt;
  }
  Signature parsed;
  const auto [end, status] = std::from_chars(t->data(), t->data() + t->size(), parsed.timestamp);
  const bool canonical = !t->empty() && (t->front() != '0' || t->size() == 1);
  if (!canonical || status != std::errc() || end != t->data() + t->size() || parsed.timestamp < 0) {
    error =
        "the signature's t is not a number of seconds since the Unix epoch, in decimal "
        "digits without leading zeros";
    return std::nullopt;
  }
  if (nonce->size() < kMinNonce || nonce->size() > kMaxNonce ||
      !std::all_of(nonce->begin(), nonce->end(), nonce_char)) {
    error = "the signature's nonce is not 16 to 64 of A-Z a-z 0-9 - _ (a random one per request)";
    return std::nullopt;
  }
  parsed.nonce = std::string(*nonce);
  if (sig->size() != 2 * kDigestBytes) {
    error = "the signature's sig is not 64 hex digits (HMAC-SHA256)";
    return std::nullopt;
  }
  for (std::size_t i = 0; i < sig->size(); i += 2) {
    const int high = durable::detail::hex_digit((*sig)[i]);
    const int low = durable::detail::hex_digit((*sig)[i + 1]);
    if (high < 0 || low < 0) {
      error = "the signature's sig is not 64 hex digits (HMAC-SHA256)";
      return std::nullopt;
    }
    parsed.digest += static_cast<char>(high * 16 + low);
  }
  return parsed;
}

std::string signed_text(std::string_view method, std::string_view target, std::int64_t timestamp,
                        std::string_view nonce, std::string_view body) {
  std::string text;
  text.reserve(method.size() + target.size() + nonce.size() + body.size() + 24);
  text.append(method).append("\n").append(target).append("\n");
  text.append(std::to_string(timestamp)).append("\n").append(nonce).append("\n").append(body);
  return text;
}

std::string hmac_sha256(std::string_view secret, std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  const unsigned char* done =
      HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest, &length);
  if (done == nullptr || length != kDigestBytes)
    throw Error(errc::encryption, "HMAC-SHA256 failed in OpenSSL");
  return std::string(reinterpret_cast<const char*>(digest), length);
}

std::string to_hex(std::string_view bytes) {
  constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (const char byte : bytes) {
    const auto value = static_cast<unsigned char>(byte);
    hex += kDigits[value >> 4];
    hex += kDigits[value & 0xf];
  }
  return hex;
}

std::optional<std::string> refuse_timestamp(std::int64_t timestamp, std::int64_t now,
                                            std::chrono::seconds window) {
  const std::int64_t off = timestamp > now ? timestamp - now : now - timestamp;
  if (off <= window.count()) return std::nullopt;
  return "the request was signed at t=" + std::to_string(timestamp) + ", " + std::to_string(off) +
         " s " + (timestamp > now ? "ahead of" : "behind") +
         " this server's clock (t=" + std::to_string(now) + "); a signature is good for " +
         std::to_string(window.count()) +
         " s either way: sign each request as it is sent, and check the client's clock";
}

ReplayGuard::Key ReplayGuard::key_of(std::string_view digest) {
  Key key;
  std::memcpy(&key.high, digest.data(), std::min(digest.size(), sizeof key.high));
  if (digest.size() > sizeof key.high) {
    std::memcpy(&key.low, digest.data() + sizeof key.high,
                std::min(digest.size() - sizeof key.high, sizeof key.low));
  }
  return key;
}

bool ReplayGuard::holds(std::string_view digest) {
  const Key key = key_of(digest);
  std::lock_guard lock(mutex_);
  return used_.contains(key);
}

ReplayGuard::Outcome ReplayGuard::accept(std::string_view digest, std::int64_t expires,
                                         std::int64_t now) {
  const Key key = key_of(digest);
  std::lock_guard lock(mutex_);
  while (!expiries_.empty() && expiries_.top().first < now) {
    used_.erase(expiries_.top().second);
    expiries_.pop();
  }
  if (used_.contains(key)) return Outcome::replayed;
  if (used_.size() >= capacity_) return Outcome::full;
  used_.insert(key);
  expiries_.emplace(expires, key);
  return Outcome::accepted;
}

}  // namespace durable::ops::detail
