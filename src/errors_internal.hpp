// SPDX-License-Identifier: Apache-2.0
#pragma once
// Turning exceptions into journaled ErrorInfo, and durable's own unwinding.

#include <durable/errors.hpp>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

namespace durable::detail {

/// Thrown by the step tools to end an invocation (a new step was journaled, the run sleeps).
/// Deliberately not a std::exception: `catch (const std::exception&)` in workflow code must not
/// see it. A `catch (...)` that swallows it is detected by the engine.
struct Unwind {};

/// The type and message of an exception, however it was thrown (throw 42 included).
ErrorInfo describe(std::exception_ptr error);

/// "Type: message" of a recorded error, for messages.
std::string error_text(const std::optional<ErrorInfo>& error);
/// What the runtime's logs and traces say of an error: "Type: message", or only "Type, its
/// message encoded" when a codec encodes the payloads (the message is one of them).
std::string error_said(const ErrorInfo& error, bool with_message);

/// A demangled C++ type name.
std::string demangle(const char* mangled);

/// "1.5 KiB", "5.2 MiB": sizes in error messages.
std::string human_bytes(std::size_t bytes);
// Levenshtein distance: how many letters to add, drop or change to turn `a` into `b` (for
// "did you mean" hints).
std::size_t edit_distance(std::string_view a, std::string_view b);

/// An exception's what() without the "[durable.x] " its code puts before a durable error's: for
/// a message that wraps it under a code of its own.
std::string_view message_of(const std::exception& error);

/// "[durable.x] message": the one place a message gets its id, for an Error's what() and for
/// the failures durable records without throwing (a run past its deadline, a quarantine).
std::string with_id(ErrorCode code, std::string_view message);
/// A journaled message without the id it begins with, if any: for a message that quotes
/// another under an id of its own.
std::string_view without_id(std::string_view message);

/// The code a message of durable's begins with ("durable.timeout" of "[durable.timeout] step
/// 'x' ..."), or empty: for the logs and the runbook, which see a journaled message, not an Error.
std::string_view error_id(std::string_view message);

/// An error that is durable's fault, not the user's: says so.
[[noreturn]] void bug(const std::string& what);

}  // namespace durable::detail
