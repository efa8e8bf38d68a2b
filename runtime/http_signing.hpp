// SPDX-License-Identifier: Apache-2.0
#pragma once
// Signed requests: the alternative to the bearer token for machine clients. A client that holds
// the server's shared secret signs each request with HMAC-SHA256 over its method, its target
// (path and query, as sent), a timestamp, a nonce and its body, and sends
//
//   Authorization: Durable-Signature t=<unix seconds>, nonce=<nonce>, sig=<64 hex digits>
//
// The server refuses a timestamp outside its window (a captured request cannot be sent later)
// and a signature it has already accepted within the window (nor sent again now). Unlike the
// token, a signature also proves that nobody changed the body or the target on the way.
// Internal to runtime/; docs/operations.md ("Signed requests") is the client's contract.

#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace durable::ops::detail {

/// The scheme of the Authorization header of a signed request.
inline constexpr std::string_view kSignatureScheme = "Durable-Signature";

/// The shortest signing secret the server takes, in bytes: 256 bits written as hex.
inline constexpr std::size_t kMinSecretBytes = 32;

/// Why `secret` cannot be a signing secret (nullopt when it can, or when it is empty: none).
std::optional<std::string> invalid_signing_secret(std::string_view secret);

/// The parts of a `Durable-Signature` header.
struct Signature {
  std::int64_t timestamp = 0;  ///< seconds since the Unix epoch, as the client signed it
  std::string nonce;           ///< 16 to 64 of [A-Za-z0-9_-], unique per request
  std::string digest;          ///< the 32 bytes of the HMAC, decoded from hex
};

/// True when the Authorization header names the signature scheme (whatever follows).
bool is_signature_header(std::string_view authorization);

/// Parses a `Durable-Signature` header; on failure, `error` says what is wrong with it.
std::optional<Signature> parse_signature(std::string_view authorization, std::string& error);

/// The text that is signed: method, target, timestamp and nonce, one per line, then the body.
std::string signed_text(std::string_view method, std::string_view target, std::int64_t timestamp,
                        std::string_view nonce, std::string_view body);

/// HMAC-SHA256 of `text` under `secret`: 32 bytes.
std::string hmac_sha256(std::string_view secret, std::string_view text);

/// Lowercase hex of `bytes`.
std::string to_hex(std::string_view bytes);

/// nullopt when `timestamp` lies within `window` of `now`; otherwise why the request is refused.
std::optional<std::string> refuse_timestamp(std::int64_t timestamp, std::int64_t now,
                                            std::chrono::seconds window);

/// The signatures accepted within the window, so that none is accepted twice. Bounded: past
/// `capacity` unexpired signatures, new ones are refused until old ones expire. Each is kept
/// by the first 128 bits of its digest (about 70 bytes of memory apiece). Thread-safe.
class ReplayGuard {
 public:
  explicit ReplayGuard(std::size_t capacity) : capacity_(capacity) {}

  enum class Outcome { accepted, replayed, full };
  /// Records `digest` as used until `expires` (Unix seconds), after forgetting the ones expired
  /// before `now`. replayed: it was recorded before; full: capacity signatures are unexpired.
  /// The caller checks the timestamp against the same `now`: a signature accepted after its
  /// expiry would be forgotten at once.
  Outcome accept(std::string_view digest, std::int64_t expires, std::int64_t now);
  /// Whether `digest` is recorded (expired or not): a replay that can be refused before its
  /// body is read.
  bool holds(std::string_view digest);

 private:
  struct Key {
    std::uint64_t high = 0;
    std::uint64_t low = 0;
    friend bool operator==(const Key&, const Key&) = default;
    friend auto operator<=>(const Key&, const Key&) = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& key) const noexcept { return key.high ^ key.low; }
  };
  using Expiry = std::pair<std::int64_t, Key>;
  static Key key_of(std::string_view digest);  // its first 128 bits

  std::size_t capacity_;
  std::mutex mutex_;
  std::unordered_set<Key, KeyHash> used_;  // guarded by mutex_
  // The earliest expiry first: what to forget next. Guarded by mutex_.
  std::priority_queue<Expiry, std::vector<Expiry>, std::greater<>> expiries_;
};

}  // namespace durable::ops::detail
