// SPDX-License-Identifier: Apache-2.0
// step.write_stream and step.close_stream (DESIGN §9, docs/messaging.md). From the workflow
// function each is journaled at its place like a step, under the base "[stream:NAME]" (ids.hpp),
// and the store applies it to the stream in the transaction that journals the entry: a replay
// meets the entry and writes nothing again. From inside a step body the value goes to the host
// at once, so a reader sees it before the body ends.

#include "body_scope.hpp"
#include "engine.hpp"
#include "ids.hpp"
#include "serialization.hpp"

namespace durable::detail {

namespace {
std::string call_text(std::string_view tool, std::string_view stream) {
  return std::string(tool) + "('" + std::string(stream) + "')";
}
}  // namespace

void Invocation::write_stream(std::string_view stream, json value) {
  check_stream_name(stream, "step.write_stream");
  std::string text = storable_text(value, "the value of " + call_text("step.write_stream", stream),
                                   config_->max_output_bytes);
  if (BodyScope* nested = scope()) {
    if (nested->transaction()) nested->refuse("step.write_stream", stream);
    host_->carry_out(decide::WriteStream{std::string(stream), std::move(text)});
    return;
  }
  journal_stream(stream, {{"stream", stream}, {"value", std::move(value)}}, "wrote to");
}

void Invocation::close_stream(std::string_view stream) {
  check_stream_name(stream, "step.close_stream");
  if (BodyScope* nested = scope()) {
    if (nested->transaction()) nested->refuse("step.close_stream", stream);
    host_->carry_out(decide::WriteStream{std::string(stream), std::nullopt});
    return;
  }
  journal_stream(stream, {{"stream", stream}, {"close", true}}, "closed");
}

void Invocation::journal_stream(std::string_view stream, json output, std::string_view did) {
  const char* tool = output.contains("close") ? "step.close_stream" : "step.write_stream";
  ReplayCursor::Match match{};
  if (begin_internal(stream_base(stream), StepKind::stream, tool, match) != nullptr) {
    return;  // written already
  }
  bool closed = false;
  try {
    closed = host_->stream_closed(std::string(stream));
  } catch (...) {
    store_failed(std::current_exception());
  }
  if (closed && !output.contains("close")) {
    throw Error(errc::conflict,
                std::string(tool) + "('" + std::string(stream) +
                    "'): the stream is closed; a closed stream takes no more values");
  }
  JournalEntry write = new_entry(match, stream_base(stream), StepKind::stream);
  write.output = std::move(output);
  std::string reason =
      step_label(write.key) + " " + std::string(did) + " stream '" + std::string(stream) + "'";
  journal_completed(std::move(write), std::move(reason));
}

}  // namespace durable::detail
