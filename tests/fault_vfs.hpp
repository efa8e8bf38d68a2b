// SPDX-License-Identifier: Apache-2.0
#pragma once
// I/O fault injection for the SQLite store: a VFS that is SQLite's own "unix" VFS with every
// write, sync, read and lock of the files under one directory counted, and the n-th of one kind
// failing with the error a test chose. A failing disk keeps failing, so by default every later
// operation of that kind fails too, until the test heals it; a lock refused as busy is refused
// once, as another process holding it for a moment would.
//
// While a FaultVfs lives it is SQLite's default VFS: every connection opened meanwhile (the
// runtime's, the test's own) goes through it, and must be closed before it is destroyed. One at
// a time per process.

#include <sqlite3.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace durable::test {

enum class IoOp { write, sync, read, lock };

/// A name for reports: "write", "sync", "read", "lock".
const char* io_op_name(IoOp op);

class FaultVfs {
 public:
  /// Watches the files whose path starts with `directory`.
  explicit FaultVfs(std::string directory);
  ~FaultVfs();
  FaultVfs(const FaultVfs&) = delete;
  FaultVfs& operator=(const FaultVfs&) = delete;

  /// From now on, the `nth` operation of kind `op` (counted from 1, from this call) fails with
  /// `code` (an SQLite result code such as SQLITE_FULL or SQLITE_IOERR_WRITE), and sqlite3's
  /// system errno reads `system_errno`. Sticky: every later one of that kind fails as well.
  void fail(IoOp op, std::int64_t nth, int code, int system_errno, bool sticky = true);
  /// No more faults; counting goes on.
  void heal();
  /// Operations of kind `op` on watched files since construction.
  std::int64_t count(IoOp op) const { return counts_[index(op)].load(); }
  /// Whether the armed fault has struck.
  bool fired() const { return fired_.load(); }

  // For the VFS's callbacks.
  bool watches(const char* path) const;
  /// Counts one operation; the result code it must fail with, or SQLITE_OK.
  int strike(IoOp op);

 private:
  static std::size_t index(IoOp op) { return static_cast<std::size_t>(op); }

  std::string directory_;
  std::array<std::atomic<std::int64_t>, 4> counts_{};
  std::atomic<int> armed_op_{-1};
  std::atomic<std::int64_t> armed_at_{0};  // the count at which the fault strikes
  std::atomic<int> code_{SQLITE_OK};
  std::atomic<int> errno_{0};
  std::atomic<bool> sticky_{true};
  std::atomic<bool> fired_{false};
  sqlite3_vfs vfs_{};
};

}  // namespace durable::test
