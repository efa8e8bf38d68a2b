#include "serialization.hpp"

#include <cmath>

#include "errors_internal.hpp"

namespace durable::detail {

namespace {
bool has_non_finite(const json& value) {
  switch (value.type()) {
    case json::value_t::number_float:
      return !std::isfinite(value.get<double>());
    case json::value_t::array:
    case json::value_t::object:
      for (const auto& item : value) {
        if (has_non_finite(item)) return true;
      }
      return false;
    default:
      return false;
  }
}
}  // namespace

std::optional<std::string> encode(const json& value, std::string& text) {
  try {
    text = value.dump();
  } catch (const json::type_error& e) {
    return std::string("it holds a string that is not valid UTF-8 (") + e.what() + ")";
  }
  // A non-finite number is written as null; only then is the walk worth making.
  if (text.find("null") != std::string::npos && has_non_finite(value)) {
    return "it holds a NaN or infinite number, which JSON cannot represent";
  }
  return std::nullopt;
}

std::string lenient_dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

json error_to_json(const ErrorInfo& e) {
  return {
      {"type", e.type}, {"message", e.message}, {"step_id", e.step_id}, {"attempts", e.attempts}};
}

ErrorInfo error_from_json(const json& j) {
  return {j.value("type", ""), j.value("message", ""), j.value("step_id", ""),
          j.value("attempts", 0)};
}

std::string shortened_dump(const json& value, std::size_t limit) {
  std::string text = lenient_dump(value);
  if (text.size() > limit) text = text.substr(0, limit) + "...";
  return text;
}

std::string storable_text(const json& value, const std::string& what, std::size_t limit) {
  std::string text;
  if (const auto problem = encode(value, text))
    throw Error(what + " cannot be stored: " + *problem);
  if (text.size() > limit) {
    throw Error(what + " is " + human_bytes(text.size()) + "; the limit is " + human_bytes(limit) +
                " (RuntimeOptions::max_output_bytes)");
  }
  return text;
}

}  // namespace durable::detail
