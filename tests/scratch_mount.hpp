// SPDX-License-Identifier: Apache-2.0
#pragma once
// A small file system a test can make read-only or fill up, for the faults an operator meets:
// a database on a read-only mount, a full disk. Permission bits cannot stand in for them when
// the tests run as root, whom they do not stop.

#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

namespace durable::test {

/// A tmpfs of `bytes` mounted at `dir` (created), in a mount namespace of the calling thread's
/// own: only this thread and the threads and processes it starts from now on see it, and
/// nothing is left mounted if the test dies. Unmounted at the end of the scope.
class ScratchMount {
 public:
  /// nullptr when this process may not mount (not root, or a container without the
  /// capability), or when DURABLE_TEST_NO_MOUNT is set (CTest runs such tests again so, for the
  /// way they go where no mount may be made): the caller says so and tests what it can without.
  static std::unique_ptr<ScratchMount> make(const std::filesystem::path& dir, std::size_t bytes) {
    if (std::getenv("DURABLE_TEST_NO_MOUNT") != nullptr) return nullptr;
    if (!private_namespace()) return nullptr;
    std::filesystem::create_directories(dir);
    const std::string size = "size=" + std::to_string(bytes);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, size.c_str()) != 0) return nullptr;
    return std::unique_ptr<ScratchMount>(new ScratchMount(dir));
  }
  ~ScratchMount() { ::umount2(dir_.c_str(), MNT_DETACH); }
  ScratchMount(const ScratchMount&) = delete;
  ScratchMount& operator=(const ScratchMount&) = delete;

  /// Remounts it read-only: every write and every file creation fails with EROFS.
  bool make_read_only() {
    return ::mount(nullptr, dir_.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) == 0;
  }
  bool make_writable() { return ::mount(nullptr, dir_.c_str(), nullptr, MS_REMOUNT, nullptr) == 0; }

  /// Writes a file until the file system is full (ENOSPC); returns its path.
  std::string fill() {
    const std::string filler = (dir_ / "filler").string();
    std::ofstream out(filler, std::ios::binary);
    const std::string block(4096, 'x');
    while (out.write(block.data(), static_cast<std::streamsize>(block.size()))) out.flush();
    return filler;
  }

 private:
  explicit ScratchMount(std::filesystem::path dir) : dir_(std::move(dir)) {}

  // Once per thread: a copy of the mount tree, private, so that what is mounted in it does not
  // propagate back to the host's.
  static bool private_namespace() {
    thread_local const bool ok = ::unshare(CLONE_NEWNS) == 0 &&
                                 ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
    return ok;
  }

  std::filesystem::path dir_;
};

}  // namespace durable::test
