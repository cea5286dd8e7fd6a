// The rules a routed call follows (lib/backend/redirect.h), without Redis:
// hand-made answers (error replies parsed from RESP text, failed statuses)
// go in, and the steps that come out are checked: MOVED and ASK, the limit
// on redirections, TRYAGAIN / CLUSTERDOWN / READONLY against the call's
// deadline, an unreachable master against the failover window, and errors
// that are no redirection. The backends that act on the steps are tested
// against real clusters and Sentinels (cluster_test.cc, sentinel_test.cc).

#include "lib/backend/redirect.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/backend/backend.h"
#include "lib/common/deadline.h"
#include "lib/redis/url.h"
#include "tests/testing/resp_reply.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace backend {
namespace {

using ::relock::testing::RespReply;
using ::relock::testing::StatusIs;
using ::testing::HasSubstr;

using Kind = RouteStep::Kind;

constexpr absl::Duration kLongWait = absl::Hours(1);

// The node that answered: a cluster member with credentials and TLS, which
// a redirection's target inherits.
redis::Endpoint At() {
  redis::Endpoint at;
  at.host = "10.0.0.1";
  at.port = 7000;
  at.username = "app";
  at.password = "secret";
  at.tls = true;
  return at;
}

// A reply parsed from RESP text, as a connection would give it.
Answer ReplyAnswer(const std::string& resp) { return Answer{RespReply(resp)}; }

Answer ErrorAnswer(absl::string_view error) {
  return ReplyAnswer(absl::StrCat("-", error, "\r\n"));
}

Answer Unreachable() {
  return Answer{absl::UnavailableError("Redis at 10.0.0.1:7000: refused")};
}

RedirectRules Rules(Deadline deadline, Resend resend = Resend::kNever,
                    absl::Duration failover_wait = kLongWait) {
  return RedirectRules("cluster", deadline, resend, failover_wait);
}

// Feeds `answer` until a step is not kRetry (at most `limit` times); the
// pauses of the retries go to `*pauses`.
RouteStep UntilNoRetry(RedirectRules& rules, const Answer& answer,
                       std::vector<absl::Duration>* pauses, int limit = 20) {
  RouteStep step;
  for (int i = 0; i < limit; ++i) {
    step = rules.Next(answer, At());
    if (step.kind != Kind::kRetry) break;
    pauses->push_back(step.pause);
  }
  return step;
}

TEST(RedirectRulesTest, PlainReplyIsDone) {
  RedirectRules rules = Rules(Deadline::After(kLongWait));
  const RouteStep step = rules.Next(ReplyAnswer(":1\r\n"), At());
  EXPECT_EQ(step.kind, Kind::kDone);
  EXPECT_FALSE(step.refresh);
}

TEST(RedirectRulesTest, MovedRedirectsAndRefreshesTheMap) {
  RedirectRules rules = Rules(Deadline::After(kLongWait));
  const RouteStep step =
      rules.Next(ErrorAnswer("MOVED 3999 10.0.0.2:7001"), At());
  ASSERT_EQ(step.kind, Kind::kRedirect);
  EXPECT_TRUE(step.refresh);
  EXPECT_EQ(step.redirect.kind, redis::Redirect::Kind::kMoved);
  EXPECT_EQ(step.redirect.slot, 3999);
  EXPECT_EQ(step.redirect.endpoint.host, "10.0.0.2");
  EXPECT_EQ(step.redirect.endpoint.port, 7001);
  // The cluster shares credentials and TLS.
  EXPECT_EQ(step.redirect.endpoint.username, "app");
  EXPECT_EQ(step.redirect.endpoint.password, "secret");
  EXPECT_TRUE(step.redirect.endpoint.tls);
}

TEST(RedirectRulesTest, AskRedirectsOnceWithoutRefreshing) {
  RedirectRules rules = Rules(Deadline::After(kLongWait));
  const RouteStep step = rules.Next(ErrorAnswer("ASK 12 10.0.0.3:7002"), At());
  ASSERT_EQ(step.kind, Kind::kRedirect);
  EXPECT_FALSE(step.refresh);
  EXPECT_EQ(step.redirect.kind, redis::Redirect::Kind::kAsk);
  EXPECT_EQ(step.redirect.endpoint.host, "10.0.0.3");
  EXPECT_EQ(step.redirect.endpoint.port, 7002);
}

TEST(RedirectRulesTest, MovedWithoutHostMeansTheAnsweringHost) {
  RedirectRules rules = Rules(Deadline::After(kLongWait));
  const RouteStep step = rules.Next(ErrorAnswer("MOVED 3999 :7005"), At());
  ASSERT_EQ(step.kind, Kind::kRedirect);
  EXPECT_EQ(step.redirect.endpoint.host, "10.0.0.1");
  EXPECT_EQ(step.redirect.endpoint.port, 7005);
}

TEST(RedirectRulesTest, MoreThanMaxRedirectsFails) {
  RedirectRules rules = Rules(Deadline::After(kLongWait));
  // MOVED and ASK count alike.
  for (int i = 0; i < RedirectRules::kMaxRedirects; ++i) {
    const Answer answer = ErrorAnswer(i % 2 == 0 ? "MOVED 1 10.0.0.2:7001"
                                                 : "ASK 1 10.0.0.3:7002");
    EXPECT_EQ(rules.Next(answer, At()).kind, Kind::kRedirect) << i;
  }
  const RouteStep step = rules.Next(ErrorAnswer("MOVED 1 10.0.0.2:7001"), At());
  EXPECT_EQ(step.kind, Kind::kFail);
  EXPECT_TRUE(step.refresh);
  EXPECT_THAT(step.status,
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr(absl::StrCat(
                           "cluster: more than ", RedirectRules::kMaxRedirects,
                           " redirections for one call; last: MOVED 1"))));
}

// While a slot migrates, the old master answers a call whose keys are not
// all there with ASK, and the importing master refuses it with TRYAGAIN
// until they all are: the call goes round for as long as the migration
// takes, within its deadline, and the limit on redirections (which catches
// a loop of redirections with no pause) does not end it.
TEST(RedirectRulesTest, AMigrationsAskAndTryAgainRetryUntilTheDeadline) {
  RedirectRules rules = Rules(Deadline::After(kLongWait));
  for (int i = 0; i < 10 * RedirectRules::kMaxRedirects; ++i) {
    ASSERT_EQ(rules.Next(ErrorAnswer("ASK 1 10.0.0.3:7002"), At()).kind,
              Kind::kRedirect)
        << i;
    ASSERT_EQ(rules
                  .Next(ErrorAnswer("TRYAGAIN Multiple keys request during "
                                    "rehashing of slot"),
                        At())
                  .kind,
              Kind::kRetry)
        << i;
  }
  RedirectRules near = Rules(Deadline::After(absl::Milliseconds(150)));
  std::vector<absl::Duration> pauses;
  RouteStep step;
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(near.Next(ErrorAnswer("ASK 1 10.0.0.3:7002"), At()).kind,
              Kind::kRedirect);
    step = near.Next(ErrorAnswer("TRYAGAIN busy"), At());
    if (step.kind != Kind::kRetry) break;
    pauses.push_back(step.pause);
  }
  EXPECT_EQ(step.kind, Kind::kFail);
  EXPECT_THAT(step.status, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                    HasSubstr("TRYAGAIN")));
  EXPECT_LE(pauses.size(), 4u);
}

// Refusals are waited out for the failover window at most, also by a call
// without a deadline (a migration left half done must not hold it forever).
TEST(RedirectRulesTest, RefusalsAreWaitedOutForTheFailoverWindowAtMost) {
  RedirectRules open_ended =
      Rules(Deadline::Never(), Resend::kNever, kLongWait);
  EXPECT_EQ(open_ended.Next(ErrorAnswer("TRYAGAIN busy"), At()).kind,
            Kind::kRetry);
  RedirectRules no_window =
      Rules(Deadline::Never(), Resend::kNever, absl::ZeroDuration());
  EXPECT_EQ(no_window.Next(ErrorAnswer("ASK 1 10.0.0.3:7002"), At()).kind,
            Kind::kRedirect);
  const RouteStep step = no_window.Next(ErrorAnswer("TRYAGAIN busy"), At());
  EXPECT_EQ(step.kind, Kind::kFail);
  EXPECT_THAT(step.status,
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("the masters kept refusing the call for 0: "
                                 "TRYAGAIN busy")));
}

TEST(RedirectRulesTest, TryAgainRetriesWithDoublingPauses) {
  RedirectRules rules = Rules(Deadline::After(kLongWait));
  std::vector<absl::Duration> pauses;
  for (int i = 0; i < 8; ++i) {
    const RouteStep step = rules.Next(ErrorAnswer("TRYAGAIN busy"), At());
    ASSERT_EQ(step.kind, Kind::kRetry);
    EXPECT_FALSE(step.refresh);
    pauses.push_back(step.pause);
  }
  const std::vector<absl::Duration> expected = {
      absl::Milliseconds(10),  absl::Milliseconds(20),  absl::Milliseconds(40),
      absl::Milliseconds(80),  absl::Milliseconds(160), absl::Milliseconds(200),
      absl::Milliseconds(200), absl::Milliseconds(200)};
  EXPECT_EQ(pauses, expected);
}

TEST(RedirectRulesTest, ClusterDownAndReadOnlyRetryAndRefresh) {
  for (const char* error :
       {"CLUSTERDOWN The cluster is down",
        "READONLY You can't write against a read only replica."}) {
    RedirectRules rules = Rules(Deadline::After(kLongWait));
    const RouteStep step = rules.Next(ErrorAnswer(error), At());
    EXPECT_EQ(step.kind, Kind::kRetry) << error;
    EXPECT_TRUE(step.refresh) << error;
    EXPECT_EQ(step.pause, RedirectRules::kFirstPause) << error;
  }
}

TEST(RedirectRulesTest, RefusedPastTheDeadlineFails) {
  RedirectRules rules = Rules(Deadline::After(absl::ZeroDuration()));
  const RouteStep step =
      rules.Next(ErrorAnswer("CLUSTERDOWN The cluster is down"), At());
  EXPECT_EQ(step.kind, Kind::kFail);
  EXPECT_TRUE(step.refresh);
  EXPECT_THAT(step.status,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("cluster: the call's deadline passed while "
                                 "the masters refused it for now: "
                                 "CLUSTERDOWN")));
}

TEST(RedirectRulesTest, RetriesStopOnceThePauseWouldPassTheDeadline) {
  // Pauses 10, 20, 40, 80 ms end within 150 ms (the rules do not sleep);
  // 160 ms would not.
  RedirectRules rules = Rules(Deadline::After(absl::Milliseconds(150)));
  std::vector<absl::Duration> pauses;
  const RouteStep step =
      UntilNoRetry(rules, ErrorAnswer("TRYAGAIN busy"), &pauses);
  EXPECT_EQ(step.kind, Kind::kFail);
  EXPECT_THAT(step.status, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_GE(pauses.size(), 1u);
  EXPECT_LE(pauses.size(), 4u);
}

TEST(RedirectRulesTest, UnreachableResendableCallWaitsForFailover) {
  RedirectRules rules =
      Rules(Deadline::After(kLongWait), Resend::kIfDropped, kLongWait);
  const RouteStep step = rules.Next(Unreachable(), At());
  EXPECT_EQ(step.kind, Kind::kRetry);
  EXPECT_TRUE(step.refresh);
  EXPECT_EQ(step.pause, RedirectRules::kFirstPause);
}

TEST(RedirectRulesTest, UnreachableCallThatMayHaveRunIsDone) {
  RedirectRules rules = Rules(Deadline::After(kLongWait), Resend::kNever);
  const RouteStep step = rules.Next(Unreachable(), At());
  EXPECT_EQ(step.kind, Kind::kDone);  // the answer as it is
  EXPECT_TRUE(step.refresh);
}

TEST(RedirectRulesTest, FailoverWindowEndsTheWait) {
  // The window (150 ms from the first unreachable answer) ends before the
  // call's deadline: the answer stands once the next pause would pass it.
  RedirectRules rules = Rules(Deadline::After(kLongWait), Resend::kIfDropped,
                              absl::Milliseconds(150));
  std::vector<absl::Duration> pauses;
  const RouteStep step = UntilNoRetry(rules, Unreachable(), &pauses);
  EXPECT_EQ(step.kind, Kind::kDone);
  EXPECT_TRUE(step.refresh);
  EXPECT_GE(pauses.size(), 1u);
  EXPECT_LE(pauses.size(), 4u);
}

TEST(RedirectRulesTest, FailoverWindowOverGivesTheAnswerAtOnce) {
  RedirectRules rules = Rules(Deadline::After(kLongWait), Resend::kIfDropped,
                              absl::ZeroDuration());
  const RouteStep step = rules.Next(Unreachable(), At());
  EXPECT_EQ(step.kind, Kind::kDone);
  EXPECT_TRUE(step.refresh);
}

TEST(RedirectRulesTest, DeadlineEndsTheFailoverWaitAsItIs) {
  // A deadline nearer than the window: the unreachable answer stands (no
  // DeadlineExceeded of the rules' own).
  RedirectRules rules = Rules(Deadline::After(absl::Milliseconds(150)),
                              Resend::kIfDropped, kLongWait);
  std::vector<absl::Duration> pauses;
  const RouteStep step = UntilNoRetry(rules, Unreachable(), &pauses);
  EXPECT_EQ(step.kind, Kind::kDone);
  EXPECT_LE(pauses.size(), 4u);
}

TEST(RedirectRulesTest, OtherErrorsAreDoneAsTheyAre) {
  RedirectRules rules = Rules(Deadline::After(kLongWait), Resend::kIfDropped);
  for (const char* error :
       {"ERR unknown command", "NOSCRIPT No matching script",
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "MOVED not-a-slot 10.0.0.2:7001", "ASK 12"}) {
    const RouteStep step = rules.Next(ErrorAnswer(error), At());
    EXPECT_EQ(step.kind, Kind::kDone) << error;
    EXPECT_FALSE(step.refresh) << error;
  }
  for (const absl::Status& failure :
       {absl::DeadlineExceededError("no reply before the call's deadline"),
        absl::FailedPreconditionError("the client is closed"),
        absl::CancelledError("not sent")}) {
    const RouteStep step = rules.Next(Answer{failure}, At());
    EXPECT_EQ(step.kind, Kind::kDone) << failure;
    EXPECT_FALSE(step.refresh) << failure;
  }
}

TEST(RedirectRulesTest, DidNotRunNamesTheRefusals) {
  for (const char* error :
       {"MOVED 1 10.0.0.2:7001", "ASK 1 10.0.0.2:7001", "TRYAGAIN busy",
        "CLUSTERDOWN The cluster is down", "READONLY replica"}) {
    EXPECT_TRUE(DidNotRun(error)) << error;
  }
  for (const char* error : {"ERR unknown command", "NOSCRIPT", "MOVEDX 1"}) {
    EXPECT_FALSE(DidNotRun(error)) << error;
  }
}

}  // namespace
}  // namespace backend
}  // namespace relock
