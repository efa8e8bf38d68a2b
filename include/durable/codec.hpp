// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Payload codecs: how run inputs and outputs, step results and error messages, event data and
/// wait matches are stored (RuntimeOptions::codec; docs/operations.md "Data at rest").

#include <functional>
#include <string>
#include <string_view>

namespace durable {

/// Whose payload a codec is encoding or decoding. An event's data, which belongs to no run,
/// has the event's id as its run_id and no correlation id; a schedule's input, the schedule's
/// id.
struct PayloadContext {
  std::string_view run_id, correlation_id;
};

/// Encodes every payload before it is stored and decodes it when read (compression, a key
/// management service, field-level encryption). `encode` takes the payload's JSON text and may
/// return any bytes; `decode` gets those bytes back and returns the JSON text. Both are called
/// from the runtime's threads, inside the store's transactions: keep them fast, and throw
/// durable::Error (or any std::exception, reported as one) for a payload they cannot decode.
/// The payload is stored with `name` beside it: a payload stored under another name, or with
/// no codec, is refused with an Error naming both, so a codec that changes its format takes a
/// new name. A name is 1 to 64 characters of [A-Za-z0-9._-].
struct Codec {
  std::string name;
  std::function<std::string(std::string_view, const PayloadContext&)> encode, decode;
};

}  // namespace durable
