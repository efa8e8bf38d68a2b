// SPDX-License-Identifier: Apache-2.0
// Payloads at rest: the codec chain, the key file, AES-256-GCM. See payloads.hpp for the stored
// form.

#include "payloads.hpp"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>
#include <durable/errors.hpp>
#include <exception>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <vector>

namespace durable::detail {

namespace {

constexpr std::size_t kNonceBytes = 12;
constexpr std::size_t kTagBytes = 16;

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<DataKey> parse_hex_key(std::string_view hex) {
  if (hex.size() != 64) return std::nullopt;
  DataKey key{};
  for (std::size_t i = 0; i < key.size(); ++i) {
    const int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    key[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return key;
}

using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

CipherCtx new_ctx() {
  CipherCtx ctx(EVP_CIPHER_CTX_new(), &EVP_CIPHER_CTX_free);
  if (!ctx) throw Error(errc::encryption, "encryption: out of memory for a cipher context");
  return ctx;
}

// AES-256-GCM, fetched once rather than at every cipher init (OpenSSL 3 looks
// EVP_aes_256_gcm() up in its provider tables each time).
const EVP_CIPHER* aes_256_gcm() {
  static EVP_CIPHER* const fetched = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  if (fetched == nullptr)
    throw Error(errc::encryption, "encryption: OpenSSL offers no AES-256-GCM");
  return fetched;
}

const unsigned char* bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

// nonce | ciphertext | tag of `plain` under `key`, `aad` bound in.
std::string seal(const DataKey& key, std::string_view plain, std::string_view aad) {
  std::string out(kNonceBytes + plain.size() + kTagBytes, '\0');
  auto* o = reinterpret_cast<unsigned char*>(out.data());
  if (RAND_bytes(o, kNonceBytes) != 1)
    throw Error(errc::encryption, "encryption: no random bytes for a nonce");
  const CipherCtx ctx = new_ctx();
  int n = 0;
  bool ok =
      EVP_EncryptInit_ex(ctx.get(), aes_256_gcm(), nullptr, key.data(), o) == 1 &&
      EVP_EncryptUpdate(ctx.get(), nullptr, &n, bytes(aad), static_cast<int>(aad.size())) == 1 &&
      EVP_EncryptUpdate(ctx.get(), o + kNonceBytes, &n, bytes(plain),
                        static_cast<int>(plain.size())) == 1 &&
      EVP_EncryptFinal_ex(ctx.get(), o + kNonceBytes + n, &n) == 1 &&
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes,
                          o + kNonceBytes + plain.size()) == 1;
  if (!ok) throw Error(errc::encryption, "encryption: AES-256-GCM failed to encrypt");
  return out;
}

// The plaintext of seal()'s output, or nullopt when it does not authenticate.
std::optional<std::string> open_sealed(const DataKey& key, std::string_view sealed,
                                       std::string_view aad) {
  if (sealed.size() < kNonceBytes + kTagBytes) return std::nullopt;
  const std::size_t size = sealed.size() - kNonceBytes - kTagBytes;
  std::string plain(size, '\0');
  auto* p = reinterpret_cast<unsigned char*>(plain.data());
  const unsigned char* s = bytes(sealed);
  std::array<unsigned char, kTagBytes> tag{};
  std::copy_n(s + kNonceBytes + size, kTagBytes, tag.begin());
  const CipherCtx ctx = new_ctx();
  int n = 0;
  const bool ok =
      EVP_DecryptInit_ex(ctx.get(), aes_256_gcm(), nullptr, key.data(), s) == 1 &&
      EVP_DecryptUpdate(ctx.get(), nullptr, &n, bytes(aad), static_cast<int>(aad.size())) == 1 &&
      EVP_DecryptUpdate(ctx.get(), p, &n, s + kNonceBytes, static_cast<int>(size)) == 1 &&
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, tag.data()) == 1 &&
      EVP_DecryptFinal_ex(ctx.get(), p + n, &n) == 1;
  if (!ok) return std::nullopt;
  return plain;
}

std::string where(const PayloadAt& at) {
  return "payload '" + std::string(at.slot) + "' of " + std::string(at.run_id);
}

// Runs a user codec's function, reporting what it throws as an Error naming the payload.
std::string call_codec(const Codec& codec, bool encoding, const PayloadAt& at,
                       std::string_view text) {
  const PayloadContext ctx{at.run_id, at.correlation_id};
  try {
    return encoding ? codec.encode(text, ctx) : codec.decode(text, ctx);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(errc::codec, "codec '" + codec.name + "' failed to " +
                                 (encoding ? "encode " : "decode ") + where(at) + ": " + e.what());
  }
}

}  // namespace

KeyFile read_key_file(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw Error(errc::config, "encryption key file '" + path + "' cannot be read; check the path");
  KeyFile file;
  file.path = path;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::string at = "encryption key file '" + path + "' line " + std::to_string(number);
    const auto colon = line.find(':');
    const std::string id = line.substr(0, colon == std::string::npos ? 0 : colon);
    if (colon == std::string::npos || !valid_name(id)) {
      throw Error(errc::config,
                  at + " is not KEY_ID:64-hex-chars (a key id of [A-Za-z0-9._-], 1 to 64)");
    }
    const auto key = parse_hex_key(std::string_view(line).substr(colon + 1));
    if (!key)
      throw Error(errc::config,
                  at + ": the key of '" + id + "' is not 64 hex characters (256 bits)");
    if (!file.keys.emplace(id, *key).second)
      throw Error(errc::config, at + ": key id '" + id + "' is twice");
    file.current = id;
  }
  if (file.keys.empty())
    throw Error(errc::config, "encryption key file '" + path + "' holds no key");
  return file;
}

Payloads::Payloads(std::optional<Codec> codec, const std::string& key_file)
    : codec_(std::move(codec)) {
  std::vector<std::string> names;
  if (codec_) {
    if (!valid_name(codec_->name) || codec_->name == kEncryptionCodec) {
      throw Error(errc::config,
                  "codec name '" + codec_->name +
                      "' is not 1 to 64 characters of [A-Za-z0-9._-] (or is reserved)");
    }
    if (!codec_->encode || !codec_->decode) {
      throw Error(errc::config, "codec '" + codec_->name + "' needs both encode and decode");
    }
    names.push_back(codec_->name);
  }
  if (!key_file.empty()) {
    keys_ = read_key_file(key_file);
    names.emplace_back(kEncryptionCodec);
  }
  for (const std::string& n : names) name_ += (name_.empty() ? "" : "+") + n;
  if (name_.empty()) name_ = kNoCodec;
}

std::string_view stored_codec(std::string_view stored) {
  if (stored.empty() || stored[0] != '~') return kNoCodec;
  const auto end = stored.find('~', 1);
  return end == std::string_view::npos ? std::string_view("(malformed)")
                                       : stored.substr(1, end - 1);
}

WrappedKey Payloads::wrap(const DataKey& key) const {
  const std::string_view plain(reinterpret_cast<const char*>(key.data()), key.size());
  return {keys_->current, base64_encode(seal(keys_->keys.at(keys_->current), plain,
                                             "durable data key " + keys_->current))};
}

DataKey Payloads::unwrap(const std::string& owner, const WrappedKey& wrapped) const {
  const auto it = keys_->keys.find(wrapped.key_id);
  if (it == keys_->keys.end()) {
    throw Error(errc::encryption, "the data key of '" + owner + "' is wrapped by key id '" +
                                      wrapped.key_id + "', which encryption key file '" +
                                      keys_->path +
                                      "' does not hold; add that key's line back to the file");
  }
  const auto plain =
      open_sealed(it->second, base64_decode(wrapped.wrapped), "durable data key " + wrapped.key_id);
  if (!plain || plain->size() != sizeof(DataKey)) {
    throw Error(errc::encryption, "the data key of '" + owner + "' does not unwrap with key id '" +
                                      wrapped.key_id + "' of '" + keys_->path +
                                      "': the file's key of that id is not the one it had");
  }
  DataKey key{};
  std::copy(plain->begin(), plain->end(), key.begin());
  return key;
}

namespace {

// The first bytes of a ciphertext: which data key sealed it. A correlation id forgotten and then
// used again gets a new data key; its old payloads, their key gone, read as forgotten.
constexpr std::size_t kHandleSize = 8;

std::string key_handle(const DataKey& key) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  const std::string text = "durable data key handle\n" +
                           std::string(reinterpret_cast<const char*>(key.data()), key.size());
  if (EVP_Digest(text.data(), text.size(), digest, nullptr, EVP_sha256(), nullptr) != 1) {
    throw Error(errc::encryption, "encryption: SHA-256 failed");
  }
  return std::string(reinterpret_cast<const char*>(digest), kHandleSize);
}

}  // namespace

// Whose data key a payload is under: its correlation id's (a run's own id when it has none), or
// for a payload of no run "event:ID" or "schedule:ID", so that forgetting a correlation id named
// like a schedule leaves the schedule's key alone.
std::string owner_of(const PayloadAt& at) {
  if (!at.correlation_id.empty()) return std::string(at.correlation_id);
  if (at.of_run) return std::string(at.run_id);
  return std::string(at.slot.substr(0, at.slot.find('-'))) + ":" + std::string(at.run_id);
}

DataKey Payloads::data_key(const PayloadAt& at, PayloadKeys& keys, bool create) const {
  const std::string owner = owner_of(at);
  if (const auto wrapped = keys.find_data_key(owner)) return unwrap(owner, *wrapped);
  if (!create) throw std::out_of_range(owner);  // forgotten: decode() says so
  DataKey key{};
  if (RAND_bytes(key.data(), static_cast<int>(key.size())) != 1) {
    throw Error(errc::encryption, "encryption: no random bytes for a data key");
  }
  const WrappedKey mine = wrap(key);
  const WrappedKey stored = keys.put_data_key(owner, mine);
  return stored.wrapped == mine.wrapped ? key : unwrap(owner, stored);
}

std::string Payloads::encode(const PayloadAt& at, std::string_view text, PayloadKeys& keys) const {
  if (!codec_ && !keys_) return std::string(text);
  std::string body = codec_ ? call_codec(*codec_, true, at, text) : std::string(text);
  if (keys_) {
    const std::string aad = std::string(at.run_id) + "\n" + std::string(at.slot);
    const DataKey key = data_key(at, keys, true);
    body = key_handle(key) + seal(key, body, aad);
  }
  return "~" + name_ + "~" + base64_encode(body);
}

std::string Payloads::decode(const PayloadAt& at, std::string_view stored,
                             PayloadKeys& keys) const {
  const std::string_view named = stored_codec(stored);
  if (named != name_) {
    throw Error(errc::codec,
                where(at) + " was stored under codec '" + std::string(named) +
                    "', but this process is configured with '" + name_ +
                    "' (RuntimeOptions::codec, encryption_key_file; the CLI's --key-file)");
  }
  if (!codec_ && !keys_) return std::string(stored);
  std::string body = base64_decode(stored.substr(named.size() + 2));
  if (keys_) {
    DataKey key{};
    try {
      key = data_key(at, keys, false);
    } catch (const std::out_of_range&) {
      return std::string(kForgotten);
    }
    if (body.size() < kHandleSize)
      throw Error(errc::encryption, where(at) + " is too short to be a ciphertext");
    // Another data key's: the one it was sealed with was forgotten (and the owner has a new one
    // since), or it was copied from another owner's row; either way it cannot be read.
    if (body.compare(0, kHandleSize, key_handle(key)) != 0) return std::string(kForgotten);
    const std::string aad = std::string(at.run_id) + "\n" + std::string(at.slot);
    auto plain = open_sealed(key, body.substr(kHandleSize), aad);
    if (!plain) {
      throw Error(errc::encryption, where(at) +
                                        " does not decrypt: it was written for another run or slot "
                                        "(copied from another row) or altered");
    }
    body = std::move(*plain);
  }
  return codec_ ? call_codec(*codec_, false, at, body) : body;
}

std::string base64_encode(std::string_view in) {
  std::string out(4 * ((in.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), bytes(in),
                                static_cast<int>(in.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::string base64_decode(std::string_view in) {
  if (in.size() % 4 != 0) throw Error(errc::codec, "a stored payload is not base64 text");
  std::string out(3 * in.size() / 4, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()), bytes(in),
                                static_cast<int>(in.size()));
  if (n < 0) throw Error(errc::codec, "a stored payload is not base64 text");
  std::size_t size = static_cast<std::size_t>(n);
  for (auto it = in.rbegin(); it != in.rend() && *it == '=' && size > 0; ++it) --size;
  out.resize(size);
  return out;
}

}  // namespace durable::detail
