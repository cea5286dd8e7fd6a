// main() of every relock test binary (instead of gtest_main): first gives
// ChildProcess a chance to run a child routine (see child_process.h), then
// runs the tests.

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/child_process.h"

#if defined(__SANITIZE_THREAD__)
#define RELOCK_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RELOCK_TEST_TSAN 1
#endif
#endif

#ifdef RELOCK_TEST_TSAN
// ThreadSanitizer suppressions built into every test binary (and so into the
// child processes they start), one false positive each:
//
// absl::Status's shared message is reference-counted inside Debian's
// libabsl_status.so, which is not built with TSan: the atomic decrement that
// orders one thread's last read of a status message before another thread
// drops the last reference and frees it is invisible, so the free looks like
// a race with that read (seen when a Future's status was read on a worker
// thread and its promise destroyed on the event loop thread). Only races
// whose stack contains that free, in Status::Unref or UnrefNonInlined (the
// latter's frame is missing when it tail-calls operator delete), are
// suppressed; a real use after free is still ASan's to find.
extern "C" const char* __tsan_default_suppressions() {
  return "race:absl::*Status::Unref\n";
}
#endif

int main(int argc, char** argv) {
  if (int rc = relock::testing::MaybeRunChildMain(argc, argv); rc >= 0) {
    return rc;
  }
  ::testing::InitGoogleMock(&argc, argv);
  return RUN_ALL_TESTS();
}
