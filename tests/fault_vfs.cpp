// SPDX-License-Identifier: Apache-2.0
// The fault-injecting VFS of fault_vfs.hpp. Each file it opens is SQLite's "unix" file followed,
// in the same allocation, by a header saying whether it is watched; every method passes to the
// unix file after counting, and memory-mapped reads are declined so that each read of a watched
// file is an xRead that can be counted and failed.

#include "fault_vfs.hpp"

#include <cstring>
#include <stdexcept>
#include <utility>

namespace durable::test {

namespace {

FaultVfs* active = nullptr;     // the one whose callbacks run; set while a FaultVfs lives
sqlite3_vfs* real = nullptr;    // SQLite's unix VFS
sqlite3_vfs* before = nullptr;  // the default VFS before this one
thread_local int injected_errno = 0;

struct File {
  sqlite3_file base;  // its pMethods: kMethods
  bool watched;
  sqlite3_file* inner() { return reinterpret_cast<sqlite3_file*>(this + 1); }
};

File* as_file(sqlite3_file* f) { return reinterpret_cast<File*>(f); }
sqlite3_file* inner(sqlite3_file* f) { return as_file(f)->inner(); }

// The fault an operation on `f` meets, or SQLITE_OK.
int strike(sqlite3_file* f, IoOp op) {
  return as_file(f)->watched && active != nullptr ? active->strike(op) : SQLITE_OK;
}

int x_close(sqlite3_file* f) { return inner(f)->pMethods->xClose(inner(f)); }

int x_read(sqlite3_file* f, void* buffer, int amount, sqlite3_int64 offset) {
  if (const int code = strike(f, IoOp::read); code != SQLITE_OK) return code;
  return inner(f)->pMethods->xRead(inner(f), buffer, amount, offset);
}

int x_write(sqlite3_file* f, const void* buffer, int amount, sqlite3_int64 offset) {
  if (const int code = strike(f, IoOp::write); code != SQLITE_OK) return code;
  return inner(f)->pMethods->xWrite(inner(f), buffer, amount, offset);
}

int x_truncate(sqlite3_file* f, sqlite3_int64 size) {
  if (const int code = strike(f, IoOp::write); code != SQLITE_OK) return code;
  return inner(f)->pMethods->xTruncate(inner(f), size);
}

int x_sync(sqlite3_file* f, int flags) {
  if (const int code = strike(f, IoOp::sync); code != SQLITE_OK) return code;
  return inner(f)->pMethods->xSync(inner(f), flags);
}

int x_file_size(sqlite3_file* f, sqlite3_int64* size) {
  return inner(f)->pMethods->xFileSize(inner(f), size);
}

int x_lock(sqlite3_file* f, int level) {
  if (const int code = strike(f, IoOp::lock); code != SQLITE_OK) return code;
  return inner(f)->pMethods->xLock(inner(f), level);
}

int x_unlock(sqlite3_file* f, int level) { return inner(f)->pMethods->xUnlock(inner(f), level); }

int x_check_reserved(sqlite3_file* f, int* out) {
  return inner(f)->pMethods->xCheckReservedLock(inner(f), out);
}

int x_file_control(sqlite3_file* f, int op, void* arg) {
  return inner(f)->pMethods->xFileControl(inner(f), op, arg);
}

int x_sector_size(sqlite3_file* f) { return inner(f)->pMethods->xSectorSize(inner(f)); }

int x_device(sqlite3_file* f) { return inner(f)->pMethods->xDeviceCharacteristics(inner(f)); }

int x_shm_map(sqlite3_file* f, int region, int size, int extend, void volatile** out) {
  return inner(f)->pMethods->xShmMap(inner(f), region, size, extend, out);
}

// Taking an exclusive lock of the WAL index is how a WAL database begins a write (or a
// checkpoint, or a recovery): the lock another process can hold.
int x_shm_lock(sqlite3_file* f, int offset, int n, int flags) {
  if ((flags & SQLITE_SHM_LOCK) != 0 && (flags & SQLITE_SHM_EXCLUSIVE) != 0) {
    if (const int code = strike(f, IoOp::lock); code != SQLITE_OK) return code;
  }
  return inner(f)->pMethods->xShmLock(inner(f), offset, n, flags);
}

void x_shm_barrier(sqlite3_file* f) { inner(f)->pMethods->xShmBarrier(inner(f)); }

int x_shm_unmap(sqlite3_file* f, int remove) {
  return inner(f)->pMethods->xShmUnmap(inner(f), remove);
}

int x_fetch(sqlite3_file* f, sqlite3_int64 offset, int amount, void** out) {
  if (as_file(f)->watched) {
    *out = nullptr;  // declined: SQLite reads the page with xRead
    return SQLITE_OK;
  }
  return inner(f)->pMethods->xFetch(inner(f), offset, amount, out);
}

int x_unfetch(sqlite3_file* f, sqlite3_int64 offset, void* page) {
  return inner(f)->pMethods->xUnfetch(inner(f), offset, page);
}

const sqlite3_io_methods kMethods = {
    3,           x_close,   x_read,     x_write,          x_truncate,     x_sync,
    x_file_size, x_lock,    x_unlock,   x_check_reserved, x_file_control, x_sector_size,
    x_device,    x_shm_map, x_shm_lock, x_shm_barrier,    x_shm_unmap,    x_fetch,
    x_unfetch,
};

int x_open(sqlite3_vfs*, const char* name, sqlite3_file* f, int flags, int* out_flags) {
  File* file = as_file(f);
  file->watched = name != nullptr && active != nullptr && active->watches(name);
  const int code = real->xOpen(real, name, file->inner(), flags, out_flags);
  // SQLite closes a file whose pMethods is set even when its open failed.
  file->base.pMethods = file->inner()->pMethods != nullptr ? &kMethods : nullptr;
  return code;
}

int x_delete(sqlite3_vfs*, const char* name, int sync_dir) {
  return real->xDelete(real, name, sync_dir);
}

int x_access(sqlite3_vfs*, const char* name, int flags, int* out) {
  return real->xAccess(real, name, flags, out);
}

int x_full_pathname(sqlite3_vfs*, const char* name, int size, char* out) {
  return real->xFullPathname(real, name, size, out);
}

void* x_dl_open(sqlite3_vfs*, const char* name) { return real->xDlOpen(real, name); }
void x_dl_error(sqlite3_vfs*, int size, char* out) { real->xDlError(real, size, out); }
void (*x_dl_sym(sqlite3_vfs*, void* handle, const char* symbol))(void) {
  return real->xDlSym(real, handle, symbol);
}
void x_dl_close(sqlite3_vfs*, void* handle) { real->xDlClose(real, handle); }

int x_randomness(sqlite3_vfs*, int size, char* out) { return real->xRandomness(real, size, out); }
int x_sleep(sqlite3_vfs*, int micros) { return real->xSleep(real, micros); }
int x_current_time(sqlite3_vfs*, double* out) { return real->xCurrentTime(real, out); }
int x_current_time64(sqlite3_vfs*, sqlite3_int64* out) {
  return real->xCurrentTimeInt64(real, out);
}

// What sqlite3_system_errno() reports after an operation failed: the injected errno on the
// thread whose operation it failed.
int x_last_error(sqlite3_vfs*, int size, char* out) {
  if (injected_errno != 0) return std::exchange(injected_errno, 0);
  return real->xGetLastError(real, size, out);
}

}  // namespace

const char* io_op_name(IoOp op) {
  switch (op) {
    case IoOp::write:
      return "write";
    case IoOp::sync:
      return "sync";
    case IoOp::read:
      return "read";
    case IoOp::lock:
      return "lock";
  }
  return "?";
}

FaultVfs::FaultVfs(std::string directory) : directory_(std::move(directory)) {
  if (active != nullptr) throw std::logic_error("one FaultVfs at a time");
  real = sqlite3_vfs_find("unix");
  before = sqlite3_vfs_find(nullptr);
  if (real == nullptr) throw std::runtime_error("SQLite has no unix VFS");
  vfs_.iVersion = 2;
  vfs_.szOsFile = static_cast<int>(sizeof(File)) + real->szOsFile;
  vfs_.mxPathname = real->mxPathname;
  vfs_.zName = "durable-fault";
  vfs_.xOpen = x_open;
  vfs_.xDelete = x_delete;
  vfs_.xAccess = x_access;
  vfs_.xFullPathname = x_full_pathname;
  vfs_.xDlOpen = x_dl_open;
  vfs_.xDlError = x_dl_error;
  vfs_.xDlSym = x_dl_sym;
  vfs_.xDlClose = x_dl_close;
  vfs_.xRandomness = x_randomness;
  vfs_.xSleep = x_sleep;
  vfs_.xCurrentTime = x_current_time;
  vfs_.xGetLastError = x_last_error;
  vfs_.xCurrentTimeInt64 = x_current_time64;
  active = this;
  if (sqlite3_vfs_register(&vfs_, 1) != SQLITE_OK) {
    active = nullptr;
    throw std::runtime_error("could not register the fault VFS");
  }
}

FaultVfs::~FaultVfs() {
  sqlite3_vfs_unregister(&vfs_);
  sqlite3_vfs_register(before != nullptr ? before : real, 1);
  active = nullptr;
}

bool FaultVfs::watches(const char* path) const {
  return std::strncmp(path, directory_.c_str(), directory_.size()) == 0;
}

void FaultVfs::fail(IoOp op, std::int64_t nth, int code, int system_errno, bool sticky) {
  heal();
  code_ = code;
  errno_ = system_errno;
  sticky_ = sticky;
  fired_ = false;
  armed_at_ = count(op) + nth;
  armed_op_ = static_cast<int>(op);
}

void FaultVfs::heal() { armed_op_ = -1; }

int FaultVfs::strike(IoOp op) {
  injected_errno = 0;  // an errno is only for the operation that failed
  const std::int64_t n = ++counts_[index(op)];
  if (armed_op_.load() != static_cast<int>(op)) return SQLITE_OK;
  const std::int64_t at = armed_at_.load();
  if (n < at || (n > at && !sticky_.load())) return SQLITE_OK;
  fired_ = true;
  injected_errno = errno_.load();
  return code_.load();
}

}  // namespace durable::test
