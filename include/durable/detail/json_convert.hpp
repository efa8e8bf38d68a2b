// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// How durable turns step results, workflow inputs and outputs into JSON and back: through
/// nlohmann's to_json/from_json, with std::optional<T> as null or a T (Debian 12's nlohmann
/// 3.11.2 has no conversion for it). The concepts let the step tools and Workflow stop a type
/// that does not convert at a static_assert that says what to write, before any template error.

#include <durable/options.hpp>
#include <optional>
#include <type_traits>

namespace durable::detail {

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {
  using value_type = T;
};

/// T converts both ways through nlohmann: to_json and from_json (or an adl_serializer) exist.
template <class T>
concept NlohmannConvertible =
    !std::is_void_v<T> && std::is_constructible_v<json, const T&> && requires(const json& value) {
  value.template get<T>();
};

/// A value durable can journal: json itself, a type with to_json/from_json, or an optional of one.
template <class T>
concept Convertible = std::is_same_v<T, json> || NlohmannConvertible<T> ||
    (is_optional<T>::value&& NlohmannConvertible<typename is_optional<T>::value_type>);

/// A value durable only writes (a workflow's output): to_json suffices, as for "text" literals.
template <class T>
concept Writable =
    !std::is_void_v<T> && (Convertible<T> || std::is_constructible_v<json, const T&>);

/// A value durable only reads (a workflow's input): from_json suffices.
template <class T>
concept Parsable = !std::is_void_v<T> &&
                   (Convertible<T> || requires(const json& value) { value.template get<T>(); });

/// A step's result: a Convertible value, or nothing (void).
template <class T>
concept StepResult = std::is_void_v<T> || Convertible<T>;

/// Moves what it can: a json result is moved, not copied (a copy of a deep value recurses).
template <class T>
requires Writable<std::remove_cvref_t<T>> json to_value(T&& value) {
  if constexpr (is_optional<std::remove_cvref_t<T>>::value) {
    return value ? json(*std::forward<T>(value)) : json(nullptr);
  } else {
    return json(std::forward<T>(value));
  }
}

/// Throws json::exception when the value does not convert.
template <Parsable T>
T from_value(const json& value) {
  if constexpr (std::is_same_v<T, json>) {
    return value;
  } else if constexpr (is_optional<T>::value) {
    if (value.is_null()) return std::nullopt;
    return value.template get<typename is_optional<T>::value_type>();
  } else {
    return value.template get<T>();
  }
}

}  // namespace durable::detail
