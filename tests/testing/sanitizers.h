// Whether this test binary is built with a sanitizer (RELOCK_SANITIZE):
// tests that load the machine for a fixed time (the safety harness) pace
// themselves under one, so that the same checks cost the machine less.

#ifndef RELOCK_TESTS_TESTING_SANITIZERS_H_
#define RELOCK_TESTS_TESTING_SANITIZERS_H_

namespace relock {
namespace testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif
#else
inline constexpr bool kSanitizedBuild = false;
#endif

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_SANITIZERS_H_
