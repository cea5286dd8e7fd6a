// Heap allocation counting: see heap_allocations.h.

#include "benchmarks/heap_allocations.h"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RELOCK_BENCH_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define RELOCK_BENCH_SANITIZED 1
#endif
#endif

namespace {

// The calls, counted apart by thread, each thread on a cache line of its
// own until kShards threads have started (a run of the three hot-path
// benchmarks starts fewer than 600, 32 per round), so that counting adds no
// contended cache line to the clients it measures (the naive client
// allocates several times as often as relock, and one shared counter would
// slow it more). Relaxed: a count, not a synchronization.
constexpr unsigned kShards = 1024;
struct alignas(64) AllocationShard {
  std::atomic<int64_t> count{0};
};
AllocationShard g_allocation_shards[kShards];

}  // namespace

namespace relock {
namespace bench {

bool CountsHeapAllocations() {
#ifdef RELOCK_BENCH_SANITIZED
  return false;
#else
  return true;
#endif
}

int64_t HeapAllocations() {
  int64_t sum = 0;
  for (const AllocationShard& shard : g_allocation_shards) {
    sum += shard.count.load(std::memory_order_relaxed);
  }
  return sum;
}

}  // namespace bench
}  // namespace relock

#ifndef RELOCK_BENCH_SANITIZED
namespace {
std::atomic<unsigned> g_next_allocation_shard{0};
// This thread's shard + 1 (0: none yet). Constant-initialized, so that
// reading it runs no initializer inside malloc.
thread_local unsigned t_allocation_shard = 0;

void CountAllocation() {
  unsigned shard = t_allocation_shard;
  if (shard == 0) {
    shard = g_next_allocation_shard.fetch_add(1, std::memory_order_relaxed) %
                kShards +
            1;
    t_allocation_shard = shard;
  }
  g_allocation_shards[shard - 1].count.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
// glibc's allocator under its own names.
void* __libc_malloc(std::size_t size);                           // NOLINT
void* __libc_calloc(std::size_t count, std::size_t size);        // NOLINT
void* __libc_realloc(void* p, std::size_t size);                 // NOLINT
void* __libc_memalign(std::size_t alignment, std::size_t size);  // NOLINT

void* malloc(std::size_t size) noexcept {
  CountAllocation();
  return __libc_malloc(size);
}
void* calloc(std::size_t count, std::size_t size) noexcept {
  CountAllocation();
  return __libc_calloc(count, size);
}
void* realloc(void* p, std::size_t size) noexcept {
  CountAllocation();
  return __libc_realloc(p, size);
}
void* memalign(std::size_t alignment, std::size_t size) noexcept {
  CountAllocation();
  return __libc_memalign(alignment, size);
}
void* aligned_alloc(std::size_t alignment, std::size_t size) noexcept {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    errno = EINVAL;  // as glibc 2.38 and later
    return nullptr;
  }
  CountAllocation();
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** out, std::size_t alignment,
                   std::size_t size) noexcept {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) {
    return EINVAL;
  }
  CountAllocation();
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}  // extern "C"
#endif
