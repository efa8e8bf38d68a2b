// SPDX-License-Identifier: Apache-2.0
// Runs' streams in the runtime: Runtime::read_stream, and a step body's writes to its run's
// streams, written through the runtime's one writer (runtime/writer.hpp, docs/messaging.md).

#include "runtime_core.hpp"
#include "stream_reads.hpp"

namespace durable::detail {

StreamRead RuntimeCore::read_stream(std::string_view run_id, std::string_view stream,
                                    std::size_t from, std::chrono::milliseconds wait) {
  return wait_stream(
      *changes_, run_id, stream, from, wait,
      [&](std::int64_t offset) {
        std::lock_guard lock(store_mutex_);
        return store_->read_stream(std::string(run_id), std::string(stream), offset,
                                   kStreamReadLimit);
      },
      "Runtime::read_stream");
}

void RuntimeCore::RunHost::write_stream_now(const std::string& stream,
                                            const std::optional<std::string>& value) {
  if (core_->halted_) return;  // the crash sweep's crash: nothing more is written
  const StreamValue write{run_->id, core_->worker_.id, stream, value, core_->now_ms()};
  Writer::Request request;
  request.stream_values = {&write};
  core_->writer_.write(request);
  const StreamWrite written = request.streamed.front();
  if (core_->halted_) return;  // crashed meanwhile: the body's write is nothing to it now
  const std::string call =
      std::string(value ? "step.write_stream" : "step.close_stream") + "('" + stream + "')";
  switch (written) {
    case StreamWrite::written:
      core_->changes_->changed(run_->id, stream);
      return;
    case StreamWrite::closed:
      if (!value) return;  // closed already: closing again does nothing
      throw NonRetryableError(errc::conflict,
                              call + " in a step body of run " + run_->id +
                                  ": the stream is closed; a closed stream takes no more values");
    case StreamWrite::not_owner:
      throw Error(errc::lease_lost,
                  call + " in a step body of run " + run_->id +
                      ": the run is no longer running in this process (it ended, was cancelled or "
                      "paused, or another worker took it over); nothing was written");
  }
}

bool RuntimeCore::RunHost::stream_closed(const std::string& stream) {
  std::lock_guard lock(core_->store_mutex_);
  return core_->store_->read_stream(run_->id, stream, 0, 0).closed;
}

}  // namespace durable::detail

namespace durable {

StreamRead Runtime::read_stream(std::string_view run_id, std::string_view stream, std::size_t from,
                                std::chrono::milliseconds wait) const {
  return core_->read_stream(run_id, stream, from, wait);
}

}  // namespace durable
