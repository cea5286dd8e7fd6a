// gMock matchers and assertions for absl::Status and absl::StatusOr<T>
// (Debian 12's Abseil predates absl/status/status_matchers.h).
//
//   ASSERT_OK(client->Ping());                  // Status or StatusOr<T>
//   EXPECT_OK(lock.Acquire()) << "while held";  // extra text streams in
//   EXPECT_THAT(lock.Release(),
//               StatusIs(absl::StatusCode::kFailedPrecondition));
//   EXPECT_THAT(result, StatusIs(absl::StatusCode::kInvalidArgument,
//                                HasSubstr("lease")));
//   EXPECT_THAT(result, IsOkAndHolds(3));       // StatusOr<T> only
//
// A failure prints the whole status (code and message), so a test needs no
// `<< s.status()` of its own. The expression is evaluated once.

#ifndef RELOCK_TESTS_TESTING_STATUS_MATCHERS_H_
#define RELOCK_TESTS_TESTING_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace relock {
namespace testing {
namespace status_internal {

inline const absl::Status& GetStatus(const absl::Status& status) {
  return status;
}
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

// Matches a Status, or a StatusOr<T> by its status, against a code matcher
// and a message matcher.
class StatusIsMatcher {
 public:
  StatusIsMatcher(::testing::Matcher<absl::StatusCode> code,
                  ::testing::Matcher<const std::string&> message)
      : code_(std::move(code)), message_(std::move(message)) {}

  template <typename StatusType>
  operator ::testing::Matcher<const StatusType&>() const {  // NOLINT
    return ::testing::MakeMatcher(new Impl<StatusType>(code_, message_));
  }

 private:
  template <typename StatusType>
  class Impl : public ::testing::MatcherInterface<const StatusType&> {
   public:
    Impl(::testing::Matcher<absl::StatusCode> code,
         ::testing::Matcher<const std::string&> message)
        : code_(std::move(code)), message_(std::move(message)) {}
    bool MatchAndExplain(
        const StatusType& value,
        ::testing::MatchResultListener* listener) const override {
      const absl::Status& status = GetStatus(value);
      *listener << "whose status is " << status;
      return code_.Matches(status.code()) &&
             message_.Matches(std::string(status.message()));
    }
    void DescribeTo(std::ostream* os) const override {
      *os << "has a status code that ";
      code_.DescribeTo(os);
      *os << ", and a message that ";
      message_.DescribeTo(os);
    }
    void DescribeNegationTo(std::ostream* os) const override {
      *os << "has a status code that ";
      code_.DescribeNegationTo(os);
      *os << ", or a message that ";
      message_.DescribeNegationTo(os);
    }

   private:
    ::testing::Matcher<absl::StatusCode> code_;
    ::testing::Matcher<const std::string&> message_;
  };

  ::testing::Matcher<absl::StatusCode> code_;
  ::testing::Matcher<const std::string&> message_;
};

// Matches an OK StatusOr<T> whose value matches `inner`.
template <typename InnerMatcher>
class IsOkAndHoldsMatcher {
 public:
  explicit IsOkAndHoldsMatcher(InnerMatcher inner) : inner_(std::move(inner)) {}

  template <typename StatusOrType>
  operator ::testing::Matcher<const StatusOrType&>() const {  // NOLINT
    using Value = typename std::decay_t<StatusOrType>::value_type;
    return ::testing::MakeMatcher(new Impl<StatusOrType>(
        ::testing::SafeMatcherCast<const Value&>(inner_)));
  }

 private:
  template <typename StatusOrType>
  class Impl : public ::testing::MatcherInterface<const StatusOrType&> {
   public:
    using Value = typename std::decay_t<StatusOrType>::value_type;
    explicit Impl(::testing::Matcher<const Value&> inner)
        : inner_(std::move(inner)) {}
    bool MatchAndExplain(
        const StatusOrType& value,
        ::testing::MatchResultListener* listener) const override {
      if (!value.ok()) {
        *listener << "whose status is " << value.status();
        return false;
      }
      *listener << "whose value is " << ::testing::PrintToString(*value);
      return inner_.Matches(*value);
    }
    void DescribeTo(std::ostream* os) const override {
      *os << "is OK and has a value that ";
      inner_.DescribeTo(os);
    }
    void DescribeNegationTo(std::ostream* os) const override {
      *os << "is not OK, or has a value that ";
      inner_.DescribeNegationTo(os);
    }

   private:
    ::testing::Matcher<const Value&> inner_;
  };

  InnerMatcher inner_;
};

// ASSERT_OK's and EXPECT_OK's check: "<expr> is not OK: <status>".
template <typename StatusType>
::testing::AssertionResult IsOkFormat(const char* expr,
                                      const StatusType& value) {
  const absl::Status& status = GetStatus(value);
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expr << " is not OK: " << status;
}

}  // namespace status_internal

// A Status, or a StatusOr<T>'s status, with this code and a message that
// matches `message` (default: any).
inline status_internal::StatusIsMatcher StatusIs(
    ::testing::Matcher<absl::StatusCode> code,
    ::testing::Matcher<const std::string&> message = ::testing::_) {
  return status_internal::StatusIsMatcher(std::move(code), std::move(message));
}

// An OK Status or StatusOr<T>.
inline status_internal::StatusIsMatcher IsOk() {
  return StatusIs(absl::StatusCode::kOk);
}

// An OK StatusOr<T> whose value matches `inner` (a value or a matcher).
template <typename InnerMatcher>
status_internal::IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>> IsOkAndHolds(
    InnerMatcher&& inner) {
  return status_internal::IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>>(
      std::forward<InnerMatcher>(inner));
}

}  // namespace testing
}  // namespace relock

// The expression (a Status or a StatusOr<T>) is OK; else the test fails
// (ASSERT_OK: and returns), printing the status.
#define ASSERT_OK(expr) \
  ASSERT_PRED_FORMAT1(::relock::testing::status_internal::IsOkFormat, expr)
#define EXPECT_OK(expr) \
  EXPECT_PRED_FORMAT1(::relock::testing::status_internal::IsOkFormat, expr)

#endif  // RELOCK_TESTS_TESTING_STATUS_MATCHERS_H_
