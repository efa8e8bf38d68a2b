// SPDX-License-Identifier: Apache-2.0
#pragma once
// Payloads at rest (DESIGN §9): the one place where a payload's JSON text becomes what the store
// keeps, and back. The store calls encode() for every payload it writes and decode() for every
// payload it reads, naming the payload's run, correlation id and slot ("input", "output",
// "step:<key>:output", ...), so that a ciphertext moved to another row fails to decode.
//
// What is stored:
//   - with neither a codec nor a key file: the JSON text itself;
//   - else `~NAME~BODY`, NAME the configured chain ("gzip", "aes-256-gcm", "gzip+aes-256-gcm")
//     and BODY base64 text (the store's columns are text on both databases). A JSON text never
//     begins with '~', so a payload stored in the clear is told from an encoded one.
//   - aes-256-gcm's BODY is base64(nonce[12] | ciphertext | tag[16]) under the data key of the
//     payload's owner (its correlation id, or its run id), with "run_id\nslot" as associated
//     data. The data key is kept wrapped (AES-256-GCM under a key of the key file, its id beside
//     it) in the data_keys table; a payload whose owner has no data key any more was forgotten
//     (Runtime::forget) and reads as {"$forgotten": true}.

#include <array>
#include <cstdint>
#include <durable/codec.hpp>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace durable::detail {

/// Where a payload lives: its run (an event's data: the event id; a schedule's input: the
/// schedule id, `of_run` false), the run's correlation id and its slot. The store fills in the
/// correlation id of a run when its caller did not know it.
struct PayloadAt {
  std::string_view run_id, correlation_id, slot;
  bool of_run = true;
};

using DataKey = std::array<unsigned char, 32>;

/// A data key as stored: wrapped by the key file's key `key_id`.
struct WrappedKey {
  std::string key_id, wrapped;  ///< wrapped: base64 text
};

/// What the store gives the payload codec: its data keys, read and written in the caller's
/// transaction.
class PayloadKeys {
 public:
  virtual ~PayloadKeys() = default;
  virtual std::optional<WrappedKey> find_data_key(const std::string& owner) = 0;
  /// Stores a new data key unless another writer stored one for the owner first; returns the
  /// one stored.
  virtual WrappedKey put_data_key(const std::string& owner, const WrappedKey& key) = 0;
};

/// The keys of an encryption key file, by id, and the id of the last (the one that wraps).
struct KeyFile {
  std::string path, current;
  std::map<std::string, DataKey> keys;
};
/// Reads a key file; throws Error naming the file and line for a missing file, an empty one, a
/// line that is not KEY_ID:64-hex-chars, or an id given twice.
KeyFile read_key_file(const std::string& path);

/// The name a payload stored in the clear goes by in messages.
inline constexpr std::string_view kNoCodec = "none";
/// The built-in encryption's codec name.
inline constexpr std::string_view kEncryptionCodec = "aes-256-gcm";
/// What a forgotten payload reads as.
inline constexpr std::string_view kForgotten = R"({"$forgotten":true})";

class Payloads {
 public:
  /// Throws Error for a codec with a bad name or no functions, and as read_key_file().
  Payloads(std::optional<Codec> codec, const std::string& key_file);

  /// The configured chain's name; kNoCodec for none.
  const std::string& name() const { return name_; }
  bool encrypts() const { return keys_.has_value(); }

  /// The stored form of a payload's JSON text.
  std::string encode(const PayloadAt& at, std::string_view text, PayloadKeys& keys) const;
  /// The JSON text of a stored payload. Throws Error naming the run and slot for a payload
  /// stored under another codec (or none), one that does not decrypt (moved from another row,
  /// tampered with), or one whose data key was wrapped by a key the file no longer has.
  std::string decode(const PayloadAt& at, std::string_view stored, PayloadKeys& keys) const;

  /// A new data key for `owner`, wrapped by the current key.
  WrappedKey wrap(const DataKey& key) const;
  /// The data key of a wrapped one; throws Error for a key id the file does not have.
  DataKey unwrap(const std::string& owner, const WrappedKey& wrapped) const;

 private:
  DataKey data_key(const PayloadAt& at, PayloadKeys& keys, bool create) const;

  std::optional<Codec> codec_;
  std::optional<KeyFile> keys_;
  std::string name_;
};

/// The data_keys row a payload is encrypted under: its correlation id, its run id, or
/// "event:ID" / "schedule:ID" for an event sent from outside and a schedule's input.
std::string owner_of(const PayloadAt& at);

/// What decode() of a payload stored without a codec checks, for stores with none configured:
/// the codec name a stored payload names (kNoCodec for JSON text).
std::string_view stored_codec(std::string_view stored);

std::string base64_encode(std::string_view bytes);
/// Throws Error for text that is not base64.
std::string base64_decode(std::string_view text);

}  // namespace durable::detail
