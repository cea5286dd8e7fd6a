// Random numbers that stay unique across fork().
//
// absl::BitGen seeds itself from a process-wide pool that is filled from the
// kernel once; fork() copies that pool, so a parent and each of its children
// draw the same "random" numbers afterwards (two children once got the same
// client id and held one lock together). Everything in relock that must
// differ between processes draws from here instead:
//
//   OsRandom64()     bytes straight from the kernel (getrandom(2)), for ids;
//   ThreadBitGen()   a per-thread generator seeded from the kernel and
//                    reseeded, in the child, on its first use after a fork,
//                    for jitter and shuffles.

#ifndef RELOCK_LIB_COMMON_RANDOM_H_
#define RELOCK_LIB_COMMON_RANDOM_H_

#include <fcntl.h>
#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>

#include "absl/random/random.h"

namespace relock {

// Fills `out` with `size` bytes from the kernel's random source. Aborts only
// if neither getrandom(2) nor /dev/urandom works (no Linux we support).
inline void OsRandomBytes(void* out, size_t size) {
  auto* bytes = static_cast<unsigned char*>(out);
  size_t filled = 0;
  while (filled < size) {
    const ssize_t n = getrandom(bytes + filled, size - filled, 0);
    if (n > 0) {
      filled += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;  // ENOSYS (a kernel before 3.17) or a seccomp filter
    }
  }
  if (filled == size) return;
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  while (fd >= 0 && filled < size) {
    const ssize_t n = read(fd, bytes + filled, size - filled);
    if (n > 0) {
      filled += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  if (fd >= 0) close(fd);
  if (filled != size) std::abort();  // no source of randomness at all
}

inline uint64_t OsRandom64() {
  uint64_t value = 0;
  OsRandomBytes(&value, sizeof(value));
  return value;
}

namespace random_internal {

// Counts the forks this process went through as a child (its own and its
// ancestors' since the handler was registered); a thread's generator seeded
// under an older count is reseeded before its next draw.
inline std::atomic<uint64_t>& ForkGeneration() {
  static std::atomic<uint64_t> generation{0};
  return generation;
}

inline void RegisterForkHandlerOnce() {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, [] {
      ForkGeneration().fetch_add(1, std::memory_order_relaxed);
    });
    return true;
  }();
  (void)registered;
}

inline absl::BitGen SeededFromOs() {
  uint32_t seed[8];
  OsRandomBytes(seed, sizeof(seed));
  std::seed_seq seq(std::begin(seed), std::end(seed));
  return absl::BitGen(seq);
}

}  // namespace random_internal

// The calling thread's generator (not to be shared with other threads),
// seeded from the kernel and reseeded after a fork.
inline absl::BitGen& ThreadBitGen() {
  random_internal::RegisterForkHandlerOnce();
  struct State {
    uint64_t generation =
        random_internal::ForkGeneration().load(std::memory_order_relaxed);
    absl::BitGen gen = random_internal::SeededFromOs();
  };
  thread_local State state;
  const uint64_t now =
      random_internal::ForkGeneration().load(std::memory_order_relaxed);
  if (state.generation != now) {
    state.generation = now;
    state.gen = random_internal::SeededFromOs();
  }
  return state.gen;
}

}  // namespace relock

#endif  // RELOCK_LIB_COMMON_RANDOM_H_
