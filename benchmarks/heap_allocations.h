// Counts every heap allocation of the process it is linked into, for the
// benchmarks that report allocations per operation (hot_path_benchmark).
// heap_allocations.cc replaces malloc, calloc, realloc and the aligned
// allocators (glibc lets a program interpose them, and every library's calls,
// libstdc++'s operator new included, come there) and passes them on to
// glibc's own. So relock's allocations through hiredis's reply reader count,
// and so do a raw hiredis client's. Up to 9780ff6 hot_path_benchmark replaced
// operator new only, so relock's figures left out its replies and the naive
// client's showed 0.
//
// Link heap_allocations.cc into one binary only where its figures are
// wanted: every allocation of that binary then pays a thread-local read and
// a relaxed add on a cache line of the thread's own.

#ifndef RELOCK_BENCHMARKS_HEAP_ALLOCATIONS_H_
#define RELOCK_BENCHMARKS_HEAP_ALLOCATIONS_H_

#include <cstdint>

namespace relock {
namespace bench {

// Whether allocations are counted: false in a sanitizer build, which keeps
// its own allocator (HeapAllocations() then stays 0; report no figures).
bool CountsHeapAllocations();

// Calls of malloc, calloc, realloc (every call, also one that resizes in
// place or frees) and the aligned allocators in this process so far, every
// thread's. Sums one counter per thread: read it outside a timed stretch.
int64_t HeapAllocations();

}  // namespace bench
}  // namespace relock

#endif  // RELOCK_BENCHMARKS_HEAP_ALLOCATIONS_H_
