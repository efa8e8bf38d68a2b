// SPDX-License-Identifier: Apache-2.0
#include "trace_context.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "serialization.hpp"

namespace durable::detail::trace {

namespace {

int hex_value(char c) {
  return c >= 'A' && c <= 'F' ? -1 : hex_digit(c);  // W3C: lowercase only
}

template <std::size_t N>
bool read_hex(std::string_view text, std::array<std::uint8_t, N>& out) {
  if (text.size() != 2 * N) return false;
  for (std::size_t i = 0; i < N; ++i) {
    const int high = hex_value(text[2 * i]);
    const int low = hex_value(text[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    out[i] = static_cast<std::uint8_t>(high * 16 + low);
  }
  return true;
}

template <std::size_t N>
std::string to_hex(const std::array<std::uint8_t, N>& bytes) {
  constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  text.reserve(2 * N);
  for (const std::uint8_t byte : bytes) {
    text += kDigits[byte >> 4];
    text += kDigits[byte & 0xf];
  }
  return text;
}

template <std::size_t N>
bool all_zero(const std::array<std::uint8_t, N>& bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::uint8_t b) { return b == 0; });
}

// The first N bytes of SHA-256 over the parts, each followed by a NUL (no part holds one: ids
// and keys are UTF-8 text without NUL), so that ("ab", "c") and ("a", "bc") differ. An id that
// comes out all zero, which W3C calls invalid, gets its last byte set.
template <std::size_t N>
std::array<std::uint8_t, N> derive(std::initializer_list<std::string_view> parts) {
  const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                        EVP_MD_CTX_free);
  bool ok = context != nullptr && EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr) == 1;
  for (const std::string_view part : parts) {
    ok = ok && EVP_DigestUpdate(context.get(), part.data(), part.size()) == 1 &&
         EVP_DigestUpdate(context.get(), "", 1) == 1;
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  ok = ok && EVP_DigestFinal_ex(context.get(), digest, &length) == 1 && length >= N;
  if (!ok) throw std::runtime_error("SHA-256 failed in OpenSSL");
  std::array<std::uint8_t, N> id{};
  std::memcpy(id.data(), digest, N);
  if (all_zero(id)) id[N - 1] = 1;
  return id;
}

}  // namespace

std::optional<TraceParent> parse_traceparent(std::string_view header) {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55 characters.
  constexpr std::size_t kLength = 55;
  if (header.size() < kLength) return std::nullopt;
  std::array<std::uint8_t, 1> version{};
  if (!read_hex(header.substr(0, 2), version) || version[0] == 0xff) return std::nullopt;
  // Version 00 is exactly 55 characters; a later one may go on, after a '-'.
  if (version[0] == 0 ? header.size() != kLength
                      : header.size() > kLength && header[kLength] != '-') {
    return std::nullopt;
  }
  if (header[2] != '-' || header[35] != '-' || header[52] != '-') return std::nullopt;
  TraceParent parent;
  std::array<std::uint8_t, 1> flags{};
  if (!read_hex(header.substr(3, 32), parent.trace_id) ||
      !read_hex(header.substr(36, 16), parent.span_id) || !read_hex(header.substr(53, 2), flags)) {
    return std::nullopt;
  }
  if (all_zero(parent.trace_id) || all_zero(parent.span_id)) return std::nullopt;
  parent.flags = flags[0];
  return parent;
}

std::string format_traceparent(const TraceParent& parent) {
  const std::array<std::uint8_t, 1> flags{parent.flags};
  return "00-" + to_hex(parent.trace_id) + "-" + to_hex(parent.span_id) + "-" + to_hex(flags);
}

TraceId trace_id_of_run(std::string_view run_id) { return derive<16>({"trace", run_id}); }

SpanId run_span(std::string_view run_id) { return derive<8>({"run", run_id}); }

SpanId step_span(std::string_view run_id, std::string_view step_key, int attempt) {
  const std::string number = std::to_string(attempt);
  return derive<8>({"step", run_id, step_key, number});
}

TraceParent run_context(std::string_view run_id, std::string_view joined) {
  TraceParent context;
  if (const std::optional<TraceParent> parent = parse_traceparent(joined)) {
    context.trace_id = parent->trace_id;
    context.flags = parent->flags;
  } else {
    context.trace_id = trace_id_of_run(run_id);
    context.flags = 1;
  }
  context.span_id = run_span(run_id);
  return context;
}

std::string hex(const TraceId& id) { return to_hex(id); }
std::string hex(const SpanId& id) { return to_hex(id); }

}  // namespace durable::detail::trace
