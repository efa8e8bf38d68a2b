// SPDX-License-Identifier: Apache-2.0
#pragma once
// SyncCounter: while it lives, SQLite's default VFS is a shim over the one it replaced that
// counts the syncs (xSync) and the transactions of files under a directory, for tests of what
// reaches the disk when, and of how many transactions a piece of work costs. Everything else
// goes through to the real VFS unchanged.

#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>

namespace durable::test {

class SyncCounter {
 public:
  explicit SyncCounter(std::string dir) : dir_(std::move(dir)) {
    real_ = sqlite3_vfs_find(nullptr);
    if (real_ == nullptr || self_ != nullptr) throw std::logic_error("SyncCounter: one at a time");
    vfs_ = *real_;
    vfs_.zName = "durable-sync-counter";
    vfs_.szOsFile = static_cast<int>(sizeof(File)) + real_->szOsFile;
    vfs_.xOpen = &open;
    vfs_.pNext = nullptr;
    self_ = this;
    if (sqlite3_vfs_register(&vfs_, 1) != SQLITE_OK) {
      self_ = nullptr;
      throw std::runtime_error("SyncCounter: could not register the VFS");
    }
  }
  ~SyncCounter() {
    sqlite3_vfs_register(real_, 1);
    sqlite3_vfs_unregister(&vfs_);
    self_ = nullptr;
  }
  SyncCounter(const SyncCounter&) = delete;
  SyncCounter& operator=(const SyncCounter&) = delete;

  /// Syncs of files under the directory since the counter was made.
  int syncs() const { return syncs_.load(); }
  /// Transactions, read or write, on databases under the directory (in WAL mode each begins by
  /// taking one of the WAL's read locks shared), and of those the write transactions (each
  /// takes the WAL's write lock).
  int transactions() const { return transactions_.load(); }
  int write_transactions() const { return write_transactions_.load(); }
  /// Makes each sync of a file under the directory take at least `delay`, as a disk's would:
  /// under eatmydata (scripts/test) a sync costs nothing, and a test of what comes together
  /// while a commit syncs would see nothing come.
  void set_sync_delay(std::chrono::microseconds delay) { sync_delay_us_ = delay.count(); }

 private:
  // Our file: the methods below, then the real VFS's file, which they forward to.
  struct File {
    sqlite3_file base;
    sqlite3_file* real;
    bool counted;
  };
  static sqlite3_file* real(sqlite3_file* f) { return reinterpret_cast<File*>(f)->real; }

  static int open(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* file, int flags, int* out) {
    File* f = reinterpret_cast<File*>(file);
    f->real = reinterpret_cast<sqlite3_file*>(f + 1);
    f->counted = name != nullptr && std::string(name).rfind(self_->dir_, 0) == 0;
    const int rc = self_->real_->xOpen(self_->real_, name, f->real, flags, out);
    // Without methods SQLite does not call xClose: only an opened file gets ours.
    f->base.pMethods = f->real->pMethods != nullptr ? &kMethods : nullptr;
    return rc;
  }
  static int close(sqlite3_file* f) { return real(f)->pMethods->xClose(real(f)); }
  static int read(sqlite3_file* f, void* b, int n, sqlite3_int64 at) {
    return real(f)->pMethods->xRead(real(f), b, n, at);
  }
  static int write(sqlite3_file* f, const void* b, int n, sqlite3_int64 at) {
    return real(f)->pMethods->xWrite(real(f), b, n, at);
  }
  static int truncate(sqlite3_file* f, sqlite3_int64 size) {
    return real(f)->pMethods->xTruncate(real(f), size);
  }
  static int sync(sqlite3_file* f, int flags) {
    if (reinterpret_cast<File*>(f)->counted) {
      ++self_->syncs_;
      if (const auto delay = self_->sync_delay_us_.load(); delay > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(delay));
      }
    }
    return real(f)->pMethods->xSync(real(f), flags);
  }
  static int file_size(sqlite3_file* f, sqlite3_int64* size) {
    return real(f)->pMethods->xFileSize(real(f), size);
  }
  static int lock(sqlite3_file* f, int level) { return real(f)->pMethods->xLock(real(f), level); }
  static int unlock(sqlite3_file* f, int level) {
    return real(f)->pMethods->xUnlock(real(f), level);
  }
  static int check_reserved(sqlite3_file* f, int* out) {
    return real(f)->pMethods->xCheckReservedLock(real(f), out);
  }
  static int control(sqlite3_file* f, int op, void* arg) {
    return real(f)->pMethods->xFileControl(real(f), op, arg);
  }
  static int sector_size(sqlite3_file* f) { return real(f)->pMethods->xSectorSize(real(f)); }
  static int characteristics(sqlite3_file* f) {
    return real(f)->pMethods->xDeviceCharacteristics(real(f));
  }
  static int shm_map(sqlite3_file* f, int page, int size, int extend, void volatile** out) {
    return real(f)->pMethods->xShmMap(real(f), page, size, extend, out);
  }
  static int shm_lock(sqlite3_file* f, int offset, int n, int flags) {
    const int rc = real(f)->pMethods->xShmLock(real(f), offset, n, flags);
    // The WAL index's locks: 0 the write lock, 1 the checkpointer's, 2 recovery's, 3 to 7 the
    // read locks.
    if (rc == SQLITE_OK && reinterpret_cast<File*>(f)->counted && n == 1 &&
        (flags & SQLITE_SHM_LOCK) != 0) {
      if (offset == 0 && (flags & SQLITE_SHM_EXCLUSIVE) != 0) ++self_->write_transactions_;
      if (offset >= 3 && (flags & SQLITE_SHM_SHARED) != 0) ++self_->transactions_;
    }
    return rc;
  }
  static void shm_barrier(sqlite3_file* f) { real(f)->pMethods->xShmBarrier(real(f)); }
  static int shm_unmap(sqlite3_file* f, int remove) {
    return real(f)->pMethods->xShmUnmap(real(f), remove);
  }
  static int fetch(sqlite3_file* f, sqlite3_int64 at, int n, void** out) {
    return real(f)->pMethods->xFetch(real(f), at, n, out);
  }
  static int unfetch(sqlite3_file* f, sqlite3_int64 at, void* p) {
    return real(f)->pMethods->xUnfetch(real(f), at, p);
  }

  // Version 3 of the methods, as the unix VFS's own (shared memory for WAL, memory maps).
  static constexpr sqlite3_io_methods kMethods = {3,
                                                  &close,
                                                  &read,
                                                  &write,
                                                  &truncate,
                                                  &sync,
                                                  &file_size,
                                                  &lock,
                                                  &unlock,
                                                  &check_reserved,
                                                  &control,
                                                  &sector_size,
                                                  &characteristics,
                                                  &shm_map,
                                                  &shm_lock,
                                                  &shm_barrier,
                                                  &shm_unmap,
                                                  &fetch,
                                                  &unfetch};

  static inline SyncCounter* self_ = nullptr;
  std::string dir_;
  sqlite3_vfs* real_ = nullptr;
  sqlite3_vfs vfs_{};
  std::atomic<int> syncs_{0};
  std::atomic<int> transactions_{0};
  std::atomic<int> write_transactions_{0};
  std::atomic<std::int64_t> sync_delay_us_{0};
};

}  // namespace durable::test
