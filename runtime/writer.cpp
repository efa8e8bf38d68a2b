// SPDX-License-Identifier: Apache-2.0
#include "writer.hpp"

#include <map>
#include <utility>

namespace durable::detail {

void Writer::write(Request& request) {
  std::unique_lock lock(mutex_);
  queue_.push_back(&request);
  while (!request.done) {
    if (leading_) {
      committed_.wait(lock);
    } else {
      lead(lock);
    }
  }
  if (request.error) std::rethrow_exception(request.error);
}

std::size_t Writer::waiting() {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

// Commits every queued request, the lock released meanwhile, and wakes their callers: in the
// order they came, those that may share a transaction together, and each that must be alone by
// itself. Those who queued while it committed wake too, and one of them leads the next group.
void Writer::lead(std::unique_lock<std::mutex>& lock) {
  std::vector<Request*> queued;
  queued.swap(queue_);
  leading_ = true;
  lock.unlock();
  const auto commit = [this](const std::vector<Request*>& group) {
    try {
      commit_(group);
    } catch (...) {
      for (Request* r : group) r->error = std::current_exception();
    }
  };
  std::vector<Request*> together;
  for (Request* r : queued) {
    if (!r->alone) {
      together.push_back(r);
      continue;
    }
    if (!together.empty()) commit(std::exchange(together, {}));
    commit({r});
  }
  if (!together.empty()) commit(together);
  lock.lock();
  for (Request* r : queued) r->done = true;
  leading_ = false;
  committed_.notify_all();
}

namespace {

// The group as one WriteGroup: the entries' writes get their runs' next positions here, in the
// order they queued, so that two entries of one run in a group follow each other.
WriteGroup gather_group(const GroupContext& context, const std::vector<Writer::Request*>& group) {
  WriteGroup all;
  std::map<const RunState*, std::size_t> seq;  // the next position of each run in the group
  const auto append = [](auto& to, const auto& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  for (Writer::Request* r : group) {
    append(all.starts, r->starts);
    append(all.writes, r->writes);
    append(all.stream_values, r->stream_values);
    append(all.progress, r->progress);
    append(all.beats, r->beats);
  }
  for (Writer::Request* r : group) {
    for (EntriesWrite* e : r->entries) {
      RunWrite& w = e->write;
      w.run_id = e->run->id;
      w.owner = context.owner;
      w.entries = &e->entries;
      w.now_ms = context.now_ms;
      auto [it, fresh] = seq.try_emplace(e->run, e->run->next_seq);
      w.first_seq = it->second;
      it->second += w.new_entries();
      all.writes.push_back(&w);
    }
  }
  if (context.halted->load()) {  // nothing more of the runs is written
    all.writes.clear();
    all.stream_values.clear();
    all.progress.clear();
  }
  return all;
}

// Moves the next `n` results of `from` (at `at`) to `to`; those it lacks (written no more, the
// runtime halted) are `none`.
template <class T>
void take(std::vector<T>& to, const std::vector<T>& from, std::size_t& at, std::size_t n, T none) {
  for (std::size_t i = 0; i < n; ++i, ++at) to.push_back(at < from.size() ? from[at] : none);
}

// Hands each request its part of what the transaction did, in the order gather_group() laid out.
void hand_out_results(const GroupWritten& out, const std::vector<Writer::Request*>& group) {
  std::size_t id = 0, written = 0, streamed = 0, saved = 0;
  for (Writer::Request* r : group) {
    take(r->ids, out.ids, id, r->starts.size(), std::string());
    take(r->written, out.written, written, r->writes.size(), Written::refused);
    take(r->streamed, out.streamed, streamed, r->stream_values.size(), StreamWrite::not_owner);
    take(r->saved, out.saved, saved, r->progress.size(), false);
  }
  for (Writer::Request* r : group) {
    for (EntriesWrite* e : r->entries) {
      take(r->written, out.written, written, 1, Written::refused);
      const Written w = r->written.back();
      if (w != Written::refused) e->run->next_seq += e->write.new_entries();
      // The run's fiber, once its bodies are back, pauses it (drive()).
      if (w == Written::pausing) e->run->pausing = true;
    }
  }
}

bool is_empty(const WriteGroup& g) {
  return g.starts.empty() && g.writes.empty() && g.stream_values.empty() && g.progress.empty() &&
         g.beats.empty();
}

}  // namespace

void commit_group(Store& store, const GroupContext& context,
                  const std::vector<Writer::Request*>& group) {
  if (group.size() == 1 && group.front()->alone) {
    group.front()->alone(store);
    return;
  }
  const WriteGroup all = gather_group(context, group);
  GroupWritten out;
  try {
    if (!is_empty(all)) out = store.write_group(all);
  } catch (...) {
    if (!context.halted->load()) throw;
    // Halted inside the transaction (a transaction body's crash): nothing was written, and the
    // runs' writes are refused rather than failed. The starts had no part in the crash: they are
    // written on their own.
    out = GroupWritten{};
    WriteGroup starts;
    starts.starts = all.starts;
    if (!starts.starts.empty()) out.ids = store.write_group(starts).ids;
  }
  hand_out_results(out, group);
}

}  // namespace durable::detail
