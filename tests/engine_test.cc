// The lock engine (lib/lock/) below the API, without Redis: its algorithms
// run on a FakeBackend (tests/testing/fake_backend.h) of one or three nodes
// and a FakeClock, so every wait is simulated time.
//
//   suite            what it pins
//   ---------------  ---------------------------------------------------------
//   QuorumTallyTest  one attempt on three nodes: grants, split votes, lost
//                    replies, silent nodes, validity; what is undone where
//   RetryTest        the retry schedule of attempts without a quorum
//   FakeWaitTest     waiting for a held lock, in simulated time
//   ReleaseJudgementTest  what release answers from several nodes mean
//   RenewalTest      the watchdog's renewal batch: renewed, gone, undecided
//   CloseBatchTest   a closing client's release batch
//
// lock_model_test.cc pins each lock type's script calls. The real-server
// tests keep what needs a server: the scripts themselves,
// wire compatibility with Redisson, pub/sub, cluster, sentinel, TLS, faults.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/backend/backend.h"
#include "lib/lock/algorithm.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "lib/lock/permit_semaphore.h"
#include "lib/lock/semaphore.h"
#include "lib/timer/timer_thread.h"
#include "lib/watchdog/watchdog.h"
#include "relock/backoff.h"
#include "tests/testing/eventually.h"
#include "tests/testing/fake_backend.h"
#include "tests/testing/fake_lock_env.h"
#include "tests/testing/notification.h"
#include "tests/testing/resp_reply.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using lock::AcquireOptions;
using lock::OwnerId;
using ::relock::testing::FakeCall;
using ::relock::testing::FakeFault;
using ::relock::testing::FakeLockEnv;
using ::relock::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kLease = absl::Seconds(30);
const OwnerId kMe{1, true};
const char kOther[] = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee:7";

// A real-time bound for what runs in simulated time: generous, since only
// a hang (or a real sleep) comes near it.
constexpr absl::Duration kRealTimeBound = absl::Seconds(20);

absl::Status AcquireFor(FakeLockEnv& env, const std::string& name,
                        absl::Duration wait,
                        const AcquireOptions& options = AcquireOptions(),
                        int64_t* token = nullptr) {
  return lock::Acquire(env, name, kMe, kLease,
                       Deadline::After(wait, &env.clock()), options, token);
}

// --- One attempt on three nodes (quorum 2).

class QuorumTallyTest : public ::testing::Test {
 protected:
  QuorumTallyTest() : env_(3) { env_.mutable_policy().noun = "redlock"; }
  FakeLockEnv env_;
  testing::FakeBackend& fake() { return env_.fake(); }
};

TEST_F(QuorumTallyTest, AQuorumOfGrantsAcquiresAndLeavesTheRestAlone) {
  fake().Hold(2, "q", kOther, 1, kLease);
  ASSERT_OK(AcquireFor(env_, "q", absl::ZeroDuration()));
  const std::string me = env_.Owner(kMe.number);
  EXPECT_EQ(fake().CountOf(0, "q", me), 1);
  EXPECT_EQ(fake().CountOf(1, "q", me), 1);
  EXPECT_EQ(fake().CountOf(2, "q", kOther), 1);
  EXPECT_EQ(fake().CallsOf(internal::kReleaseAllScript), 0u);
  ASSERT_OK(lock::Release(env_, "q", kMe));
  EXPECT_EQ(fake().CountOf(0, "q", me), 0);
  EXPECT_EQ(fake().CountOf(2, "q", kOther), 1);
}

TEST_F(QuorumTallyTest, ASplitVoteUndoesTheNodeItTook) {
  fake().Hold(1, "q", kOther, 1, kLease);
  fake().Hold(2, "q", "ffffffff-bbbb-4ccc-8ddd-eeeeeeeeeeee:1", 1, kLease);
  EXPECT_THAT(AcquireFor(env_, "q", absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("held by another owner")));
  EXPECT_EQ(fake().CountOf(0, "q", env_.Owner(kMe.number)), 0);
  // The undo went to node 0 only: the node it took.
  std::vector<size_t> undone;
  for (const FakeCall& c : fake().calls()) {
    if (c.script == internal::kReleaseAllScript) undone.push_back(c.node);
  }
  EXPECT_THAT(undone, ElementsAre(0u));
}

TEST_F(QuorumTallyTest, TooFewAnswersIsUnavailableAndWhatRanIsUndone) {
  fake().SetFault(1, FakeFault::kDown);
  fake().SetFault(2, FakeFault::kSilent);
  const absl::Status s = AcquireFor(env_, "q", absl::Seconds(1));
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable,
                          HasSubstr("no quorum (2 of 3)")));
  EXPECT_THAT(s.message(), HasSubstr("fake-node-0:6379: acquired"));
  EXPECT_EQ(fake().CountOf(0, "q", env_.Owner(kMe.number)), 0);
  EXPECT_FALSE(env_.holds().Find("q", kMe.number).has_value());
}

TEST_F(QuorumTallyTest, AFreshAcquireWhoseReplyWasLostIsUndoneThere) {
  fake().SetFault(0, FakeFault::kLoseReply);  // ran, but no reply
  fake().SetFault(1, FakeFault::kDown);
  EXPECT_THAT(AcquireFor(env_, "q", absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kUnavailable));
  // Node 0 ran the acquire; the undo (sent to every node whose outcome is
  // unknown) removed it.
  fake().SetFault(0, FakeFault::kNone);
  EXPECT_EQ(fake().CountOf(0, "q", env_.Owner(kMe.number)), 0);
  EXPECT_EQ(fake().CountOf(2, "q", env_.Owner(kMe.number)), 0);
}

TEST_F(QuorumTallyTest, AGrantThatUsedUpItsValidityIsUndone) {
  // A Redlock checks validity: lease - elapsed - drift must stay positive.
  // Node 2 never answers, so the attempt lasts its whole timeout (the
  // lease itself here) and nothing of the lease is left.
  lock::LockPolicy& policy = env_.mutable_policy();
  policy.check_validity = true;
  policy.attempt_timeout_factor = 1.0;
  policy.command_timeout = absl::Minutes(1);
  fake().SetFault(2, FakeFault::kSilent);
  EXPECT_THAT(
      AcquireFor(env_, "q", absl::ZeroDuration()),
      StatusIs(absl::StatusCode::kUnavailable, HasSubstr("validity used up")));
  EXPECT_EQ(fake().CountOf(0, "q", env_.Owner(kMe.number)), 0);
  EXPECT_EQ(fake().CountOf(1, "q", env_.Owner(kMe.number)), 0);
  EXPECT_GE(env_.Elapsed(), kLease);
}

TEST_F(QuorumTallyTest, WithoutAValidityCheckASlowQuorumStillAcquires) {
  // The attempt lasts half the lease (node 2's timeout); the grants stand.
  env_.mutable_policy().attempt_timeout_factor = 0.5;
  env_.mutable_policy().command_timeout = absl::Minutes(1);
  fake().SetFault(2, FakeFault::kSilent);
  ASSERT_OK(AcquireFor(env_, "q", absl::ZeroDuration()));
  EXPECT_EQ(env_.Elapsed(), kLease / 2);
  EXPECT_EQ(fake().CountOf(1, "q", env_.Owner(kMe.number)), 1);
}

TEST_F(QuorumTallyTest, UnacknowledgedGrantsCountAsNotGrantedAndAreUndone) {
  // A responder answers node 1 as granted but says no replica acknowledged
  // it (WAIT's count), as a master cut off from its replicas would.
  AcquireOptions options;
  options.replica_sync.replicas = 1;
  options.replica_sync.timeout = absl::Milliseconds(50);
  fake().SetResponder(1, [&](const FakeCall& call, testing::FakeNode& node) {
    std::vector<std::pair<std::string, std::string>> published;
    backend::Answer a{node.Run(call, env_.clock().Now(), &published)};
    if (call.script == internal::kAcquireScript) a.acked = 0;
    return a;
  });
  fake().SetFault(2, FakeFault::kDown);
  EXPECT_THAT(AcquireFor(env_, "q", absl::ZeroDuration(), options),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("only 0 of the 1 required replicas")));
  EXPECT_EQ(fake().CountOf(0, "q", env_.Owner(kMe.number)), 0);
  EXPECT_EQ(fake().CountOf(1, "q", env_.Owner(kMe.number)), 0);
}

// --- Retries of attempts without a quorum.

// Has `env` retry attempts without a quorum: `tries` in all, paced by
// `backoff` (which must be OK).
void WithRetries(
    FakeLockEnv& env, int tries,
    absl::StatusOr<std::shared_ptr<const BackoffStrategy>> backoff) {
  ASSERT_OK(backoff);
  env.mutable_policy().tries = tries;
  env.mutable_policy().retry_backoff = *std::move(backoff);
}

TEST(RetryTest, AttemptsWithoutAnswersAreRetriedOnTheBackoffSchedule) {
  FakeLockEnv env;
  ASSERT_NO_FATAL_FAILURE(WithRetries(
      env, 3, ListBackoff({absl::Milliseconds(100), absl::Milliseconds(300)})));
  env.fake().SetFault(0, FakeFault::kDown);
  const absl::Time real_start = absl::Now();
  EXPECT_THAT(AcquireFor(env, "r", absl::Minutes(1)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("after 3 attempt(s)")));
  EXPECT_EQ(env.fake().CallsOf(internal::kAcquireScript), 3u);
  // Exactly the two pauses, in simulated time.
  EXPECT_EQ(env.Elapsed(), absl::Milliseconds(400));
  EXPECT_LT(absl::Now() - real_start, kRealTimeBound);
}

TEST(RetryTest, APauseThatWouldPassTheDeadlineEndsTheWait) {
  FakeLockEnv env;
  ASSERT_NO_FATAL_FAILURE(
      WithRetries(env, 5, ConstantBackoff(absl::Seconds(10))));
  env.fake().SetFault(0, FakeFault::kDown);
  EXPECT_THAT(AcquireFor(env, "r", absl::Seconds(5)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("wait ended without a quorum")));
  EXPECT_EQ(env.fake().CallsOf(internal::kAcquireScript), 1u);
  EXPECT_EQ(env.Elapsed(), absl::ZeroDuration());
}

TEST(RetryTest, FailuresCountAcrossTheHandOverToTheWait) {
  // A blocking acquire's attempts run on the calling thread until the lock
  // is found held; the wait then runs on the machine, which goes on
  // counting: attempt 1 gets no answer, attempt 2 finds the lock held,
  // attempt 3 (after the wait) gets no answer again: the second failure of
  // two tries ends the call.
  FakeLockEnv env;
  ASSERT_NO_FATAL_FAILURE(
      WithRetries(env, 2, ConstantBackoff(absl::Milliseconds(10))));
  int acquires = 0;
  env.fake().SetResponder(0, [&](const FakeCall& call, testing::FakeNode&) {
    if (call.script != internal::kAcquireScript) {
      return backend::Answer{testing::IntReply(0)};
    }
    if (++acquires == 2) return backend::Answer{testing::IntReply(100)};
    return backend::Answer{absl::UnavailableError("no answer (fake)")};
  });
  EXPECT_THAT(AcquireFor(env, "r", absl::Minutes(1)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("after 2 attempt(s)")));
  EXPECT_EQ(acquires, 3);
}

TEST(RetryTest, OneNodeWithoutRetriesReturnsItsOwnError) {
  FakeLockEnv env;
  env.fake().SetFault(0, FakeFault::kDown);
  EXPECT_THAT(AcquireFor(env, "r", absl::Seconds(5)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("connection refused (fake)")));
  EXPECT_EQ(env.fake().CallsOf(internal::kAcquireScript), 1u);
}

// Answers acquires on node 0 by the model, except the ones `down` says are
// refused (connection refused, as by a restarting server); counts them.
void RefuseAcquires(FakeLockEnv& env, int* acquires,
                    std::function<bool(int)> down) {
  env.fake().SetResponder(
      0, [&env, acquires, down = std::move(down)](const FakeCall& call,
                                                  testing::FakeNode& node) {
        if (call.script == internal::kAcquireScript && down(++*acquires)) {
          return backend::Answer{
              absl::UnavailableError("connection refused (fake)")};
        }
        std::vector<std::pair<std::string, std::string>> published;
        return backend::Answer{node.Run(call, env.clock().Now(), &published)};
      });
}

TEST(RetryTest, AWaiterOnOneNodeRidesOutARestart) {
  // The waiter found the lock held; its re-checks then find Redis refusing
  // connections (its pub/sub connection came back before the pooled one):
  // it keeps waiting, and gets the lock when the holder's lease ends.
  FakeLockEnv env;
  env.fake().Hold(0, "r", kOther, 1, absl::Seconds(3));
  int acquires = 0;
  RefuseAcquires(env, &acquires, [](int n) { return n == 2 || n == 3; });
  ASSERT_OK(AcquireFor(env, "r", absl::Minutes(1)));
  EXPECT_EQ(env.fake().CountOf(0, "r", env.Owner(kMe.number)), 1);
  EXPECT_EQ(acquires, 5);  // held, refused twice, held, acquired
  EXPECT_GE(env.Elapsed(), absl::Seconds(3));
  EXPECT_LE(env.Elapsed(), absl::Seconds(4));
  ASSERT_OK(lock::Release(env, "r", kMe));
}

TEST(RetryTest, AWaiterRidesOutAnOutageOnlyAsLongAsItsSubscriptionWould) {
  // A node that stays unreachable ends the wait with its error once the
  // outage outlasts the pub/sub bound (FakeLockEnv: confirm_timeout() 4 s),
  // long before the wait's own minute; re-checks back off (no busy loop).
  FakeLockEnv env;
  env.fake().Hold(0, "r", kOther, 1, absl::Hours(1));
  int acquires = 0;
  RefuseAcquires(env, &acquires, [](int n) { return n >= 2; });
  EXPECT_THAT(AcquireFor(env, "r", absl::Minutes(1)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("connection refused (fake) (still, after")));
  EXPECT_GE(env.Elapsed(), absl::Seconds(2));
  EXPECT_LE(env.Elapsed(), absl::Seconds(4));
  EXPECT_LT(acquires, 20);
  // The same within a shorter wait: its deadline ends it first.
  acquires = 0;
  EXPECT_THAT(AcquireFor(env, "r", absl::Milliseconds(500)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("connection refused (fake)")));
}

TEST(RetryTest, AWaiterIsNotRetriedPastAnUnacknowledgedAcquire) {
  // With replica acknowledgement, the waiter's re-check after the holder's
  // lease takes the lock, but no replica acknowledges it (a master cut off
  // from its replicas): the acquire is undone and the wait ends at once with
  // that error, as ReplicaSync promises, rather than re-checking as through
  // a restart.
  FakeLockEnv env;
  env.fake().Hold(0, "u", kOther, 1, absl::Seconds(3));
  int acquires = 0;
  env.fake().SetResponder(
      0, [&](const FakeCall& call, testing::FakeNode& node) {
        std::vector<std::pair<std::string, std::string>> published;
        backend::Answer a{node.Run(call, env.clock().Now(), &published)};
        if (call.script == internal::kAcquireScript) {
          ++acquires;
          a.acked = 0;
        }
        return a;
      });
  AcquireOptions options;
  options.replica_sync.replicas = 1;
  options.replica_sync.timeout = absl::Milliseconds(50);
  EXPECT_THAT(AcquireFor(env, "u", absl::Minutes(1), options),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("only 0 of the 1 required replicas"),
                             Not(HasSubstr("re-check")))));
  // Held, held again (the re-check once subscribed), then granted but not
  // acknowledged: no re-check after that.
  EXPECT_EQ(acquires, 3);
  EXPECT_EQ(env.fake().CountOf(0, "u", env.Owner(kMe.number)), 0);
}

TEST(RetryTest, ASemaphoreAcquireIsSentOnceAndALostAnswerEndsTheWait) {
  // A semaphore's acquire takes permits each time it runs: never resent
  // after a dropped connection, and a waiter whose re-check lost its answer
  // (the permits may have been taken) ends with that error instead of
  // re-checking, which could take more.
  FakeLockEnv env;
  std::vector<backend::Resend> sent;
  env.fake().SetResponder(
      0, [&](const FakeCall& call, testing::FakeNode&) -> backend::Answer {
        if (call.script != internal::kSemaphoreAcquireScript) {
          return backend::Answer{testing::RespReply(":0\r\n")};
        }
        sent.push_back(call.resend);
        if (sent.size() == 1) {
          return backend::Answer{testing::RespReply(":60000\r\n")};  // short
        }
        return backend::Answer{
            absl::UnavailableError("connection lost before the reply (fake)")};
      });
  EXPECT_THAT(
      lock::AcquirePermits(env, "s", 1, Deadline::After(absl::Minutes(1))),
      StatusIs(absl::StatusCode::kUnavailable,
               AllOf(HasSubstr("connection lost before the reply"),
                     Not(HasSubstr("re-check")))));
  EXPECT_EQ(sent, (std::vector<backend::Resend>{backend::Resend::kNever,
                                                backend::Resend::kNever}));
}

TEST(RetryTest, AWaiterWhoseReCheckMeetsCloseIsCancelled) {
  // Close() came while the waiter re-checked: the re-check fails as every
  // request of a closed client does, and the wait ends Cancelled (as the
  // wake-up Close() sends ends it), not with the request's error.
  FakeLockEnv env;
  env.fake().Hold(0, "c", kOther, 1, absl::Hours(1));
  int acquires = 0;
  RefuseAcquires(env, &acquires, [&env](int n) {
    if (n < 2) return false;
    env.set_closed(true);
    return true;
  });
  EXPECT_THAT(AcquireFor(env, "c", absl::Minutes(1)),
              StatusIs(absl::StatusCode::kCancelled,
                       HasSubstr("closed while waiting")));
  EXPECT_EQ(acquires, 2);
}

TEST(RetryTest, ASemaphoreReCheckThatMeetsCloseMayHaveTakenPermits) {
  // A semaphore waiter's re-check fails because Close() came (the closed
  // connection fails what it had sent): its script may have run and taken
  // the permits, so the wait ends Unavailable, which says so, not
  // Cancelled, which would say nothing was taken.
  FakeLockEnv env;
  int acquires = 0;
  env.fake().SetResponder(
      0, [&](const FakeCall& call, testing::FakeNode&) -> backend::Answer {
        if (call.script != internal::kSemaphoreAcquireScript) {
          return backend::Answer{testing::RespReply(":0\r\n")};
        }
        if (++acquires == 1) {
          return backend::Answer{testing::RespReply(":60000\r\n")};  // short
        }
        env.set_closed(true);
        return backend::Answer{
            absl::FailedPreconditionError("the client is closed (fake)")};
      });
  EXPECT_THAT(
      lock::AcquirePermits(env, "s", 1, Deadline::After(absl::Minutes(1))),
      StatusIs(absl::StatusCode::kUnavailable,
               AllOf(HasSubstr("the client is closed"),
                     HasSubstr("may still have taken what it asked for"))));
  EXPECT_EQ(acquires, 2);
}

// A semaphore acquire granted as Close() ran (here: the client closes while
// the attempt is under way): its caller can no longer release through this
// client, and Close() gives back no plain semaphore's permits, so the call
// gives them back and says Cancelled; a give-back that fails is Unavailable
// (the permits may still be taken). Blocking and asynchronous alike.
TEST(RetryTest, ASemaphoreGrantThatMeetsCloseGivesThePermitsBack) {
  for (const bool give_back_fails : {false, true}) {
    for (const bool async : {false, true}) {
      SCOPED_TRACE(
          absl::StrCat("give_back_fails ", give_back_fails, ", async ", async));
      FakeLockEnv env;
      std::vector<std::string> added;
      env.fake().SetResponder(
          0, [&](const FakeCall& call, testing::FakeNode&) -> backend::Answer {
            if (call.script == internal::kSemaphoreAcquireScript) {
              env.set_closed(true);  // Close() runs meanwhile
              return backend::Answer{testing::RespReply("$-1\r\n")};  // taken
            }
            if (call.script == internal::kSemaphoreAddScript) {
              added.push_back(call.args.empty() ? "" : call.args[0]);
              // Close() waits for it before it closes the backend.
              EXPECT_FALSE(env.holds().AwaitReleases(absl::ZeroDuration()));
              if (give_back_fails) {
                return backend::Answer{
                    absl::UnavailableError("connection lost (fake)")};
              }
              return backend::Answer{testing::RespReply(":3\r\n")};
            }
            return backend::Answer{testing::RespReply(":0\r\n")};
          });
      absl::Status s;
      if (async) {
        testing::Notification done;
        lock::AcquirePermitsAsync(env, nullptr, "s", 3,
                                  Deadline::After(absl::Minutes(1)),
                                  [&](absl::Status got) {
                                    s = std::move(got);
                                    done.Notify();
                                  });
        ASSERT_TRUE(done.WaitForNotificationWithTimeout(kRealTimeBound));
      } else {
        s = lock::AcquirePermits(env, "s", 3,
                                 Deadline::After(absl::Minutes(1)));
      }
      EXPECT_THAT(added, ElementsAre("3"));
      EXPECT_TRUE(env.holds().AwaitReleases(absl::ZeroDuration()));
      if (give_back_fails) {
        EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable,
                                HasSubstr("may still be taken")));
      } else {
        EXPECT_THAT(
            s, StatusIs(absl::StatusCode::kCancelled, HasSubstr("given back")));
      }
    }
  }
}

// The same for a lock or a permit that Close() overtook (acquire.cc,
// RegisterHold()): its release is counted until answered, so that Close()
// waits for it before it closes the backend (the release went out, then the
// backend closed under it: Unavailable, the lock held until its lease).
TEST(RetryTest, CloseAwaitsTheReleaseOfAGrantThatMetIt) {
  enum class What { kLock, kLockAsync, kPermit };
  for (const What what : {What::kLock, What::kLockAsync, What::kPermit}) {
    SCOPED_TRACE(static_cast<int>(what));
    FakeLockEnv env;
    int released = 0;
    env.fake().SetResponder(
        0, [&](const FakeCall& call, testing::FakeNode&) -> backend::Answer {
          if (call.script == internal::kAcquireScript ||
              call.script == internal::kPermitAcquireScript) {
            env.set_closed(true);  // Close() runs meanwhile
            return backend::Answer{testing::NilReply()};  // taken
          }
          ++released;
          EXPECT_FALSE(env.holds().AwaitReleases(absl::ZeroDuration()));
          return backend::Answer{testing::IntReply(1)};
        });
    const Deadline deadline = Deadline::After(absl::Minutes(1));
    absl::Status s;
    if (what == What::kLock) {
      s = lock::Acquire(env, "r", kMe, kLease, deadline, AcquireOptions());
    } else if (what == What::kLockAsync) {
      testing::Notification done;
      lock::AcquireAsync(env, nullptr, "r", OwnerId{42, false}, kLease,
                         deadline, AcquireOptions(),
                         [&](absl::Status got, int64_t) {
                           s = std::move(got);
                           done.Notify();
                         });
      ASSERT_TRUE(done.WaitForNotificationWithTimeout(kRealTimeBound));
      // (The release is sent without waiting for its answer.)
      EXPECT_TRUE(env.holds().AwaitReleases(kRealTimeBound));
    } else {
      s = lock::AcquirePermit(env, "p", absl::InfiniteDuration(), deadline)
              .status();
    }
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kCancelled,
                            HasSubstr("the client was closed")));
    EXPECT_EQ(released, 1);
    EXPECT_TRUE(env.holds().AwaitReleases(absl::ZeroDuration()));
  }
}

// A re-entry that Redis counted while the client found the hold lost (its
// loss check ran as the re-entry was under way): Aborted, and the level it
// added is given back, instead of a fresh count of 1 whose release would
// free the lock under the outer level. (Found by review.)
TEST(RetryTest, AReentryThatMeetsTheLossCheckGivesItsLevelBack) {
  FakeLockEnv env;
  ASSERT_OK(AcquireFor(env, "r", absl::ZeroDuration()));
  size_t releases = 0;
  env.fake().SetResponder(
      0, [&](const FakeCall& call, testing::FakeNode&) -> backend::Answer {
        if (call.script == internal::kAcquireScript) {
          EXPECT_TRUE(env.holds().MarkLost("r", kMe.number).has_value());
          return backend::Answer{testing::NilReply()};  // counted: 2
        }
        if (call.script == internal::kReleaseScript) ++releases;
        return backend::Answer{testing::IntReply(0)};  // holds remain
      });
  EXPECT_THAT(AcquireFor(env, "r", absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kAborted,
                       HasSubstr("while this re-entry was under way")));
  EXPECT_EQ(releases, 1u);
  const absl::optional<lock::HoldFacts> hold =
      env.holds().FindFacts("r", kMe.number);
  ASSERT_TRUE(hold.has_value());
  EXPECT_TRUE(hold->lost());
  EXPECT_EQ(hold->count, 1);
}

// --- Waiting for a held lock, in simulated time.

TEST(FakeWaitTest, AWaiterGetsTheLockWhenTheHoldersLeaseEnds) {
  FakeLockEnv env;
  env.fake().Hold(0, "w", kOther, 1, absl::Minutes(2));
  const absl::Time real_start = absl::Now();
  ASSERT_OK(AcquireFor(env, "w", absl::Minutes(5)));
  EXPECT_EQ(env.fake().CountOf(0, "w", env.Owner(kMe.number)), 1);
  // Not before the lease ended; re-checked at its end (plus a millisecond),
  // not on a poll interval.
  EXPECT_GE(env.Elapsed(), absl::Minutes(2));
  EXPECT_LE(env.Elapsed(), absl::Minutes(2) + absl::Seconds(1));
  EXPECT_LT(absl::Now() - real_start, kRealTimeBound);
  EXPECT_EQ(env.metrics().Snapshot().waits, 1u);
  ASSERT_OK(lock::Release(env, "w", kMe));
}

TEST(FakeWaitTest, AWaitThatOutlastsItsDeadlineIsDeadlineExceeded) {
  FakeLockEnv env;
  env.fake().Hold(0, "w", kOther, 1, absl::Hours(1));
  EXPECT_THAT(AcquireFor(env, "w", absl::Minutes(1)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("held by another owner")));
  EXPECT_GE(env.Elapsed(), absl::Minutes(1));
  EXPECT_LT(env.Elapsed(), absl::Hours(1));
  EXPECT_EQ(env.fake().CountOf(0, "w", kOther), 1);
}

// A wait that ends before its subscription is confirmed (the pub/sub
// connection reconnecting, or a proxy that drops SUBSCRIBE) heard no unlock
// message: its end makes one more attempt, which finds the lock freed in the
// meantime, rather than reporting it held throughout.
TEST(FakeWaitTest, AWaitThatEndsUnconfirmedTriesOnceMore) {
  FakeLockEnv env;
  env.fake().SetSubscribeStatus(
      absl::DeadlineExceededError("not confirmed yet (fake)"));
  // The holder's lease ends after 1 s; the wait (3 s) ends before the
  // confirmation's own bound (confirm_timeout(), 4 s).
  env.fake().Hold(0, "u", kOther, 1, absl::Seconds(1));
  ASSERT_OK(AcquireFor(env, "u", absl::Seconds(3)));
  EXPECT_EQ(env.fake().CountOf(0, "u", env.Owner(kMe.number)), 1);
  EXPECT_GE(env.Elapsed(), absl::Seconds(3));  // at the wait's end
  EXPECT_EQ(env.fake().CallsOf(internal::kAcquireScript), 2u);
  ASSERT_OK(lock::Release(env, "u", kMe));
  // Still held at the end: DeadlineExceeded, after that one more attempt.
  env.fake().ClearCalls();
  env.fake().Hold(0, "h", kOther, 1, absl::Hours(1));
  EXPECT_THAT(AcquireFor(env, "h", absl::Seconds(3)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("held by another owner")));
  EXPECT_EQ(env.fake().CallsOf(internal::kAcquireScript), 2u);
}

TEST(FakeWaitTest, AnUnlockMessageWakesTheWaiterBeforeTheLeaseEnds) {
  FakeLockEnv env;
  env.fake().SetAutoAdvance(false);  // time stands still unless moved
  env.fake().Hold(0, "w", kOther, 1, absl::Hours(1));
  absl::Status got = absl::UnknownError("not done");
  std::thread waiter([&] { got = AcquireFor(env, "w", absl::Hours(2)); });
  // Once the waiter listens (it re-checked after subscribing), the holder
  // releases: its script publishes the unlock message.
  while (env.fake().CallsOf(internal::kAcquireScript) < 2) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const std::vector<absl::string_view> keys = {"w",
                                               "redisson_lock__channel:{w}"};
  const std::vector<absl::string_view> args = {"0", "0", kOther, "publish"};
  backend::ScriptCall release;
  release.script = internal::kReleaseScript;
  release.keys = keys;
  release.args = args;
  std::vector<backend::Answer> released = env.fake().Run(release);
  ASSERT_OK(released[0].reply);
  EXPECT_EQ(released[0].reply->integer(), 1);
  waiter.join();
  ASSERT_OK(got);
  EXPECT_EQ(env.Elapsed(), absl::ZeroDuration());  // woken, not timed out
}

TEST(FakeWaitTest, AsyncAcquireWaitsOnTheSameMachine) {
  FakeLockEnv env;
  env.fake().Hold(0, "a", kOther, 1, absl::Seconds(45));
  const OwnerId owner{42, false};
  testing::Notification done;
  absl::Status got;
  lock::AcquireAsync(env, nullptr, "a", owner, kLease,
                     Deadline::After(absl::Minutes(1), &env.clock()),
                     AcquireOptions(), [&](absl::Status s, int64_t) {
                       got = std::move(s);
                       done.Notify();
                     });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kRealTimeBound));
  ASSERT_OK(got);
  EXPECT_GE(env.Elapsed(), absl::Seconds(45));
  EXPECT_EQ(env.fake().CountOf(0, "a", env.Owner(owner.number)), 1);
}

// An explicit lease that ended on Redis before this client's lease-end
// timer ran (a late timer thread, under load): acquiring again is a fresh
// hold, as it is once the timer ran, not a re-entry of a hold Redis no
// longer has (that was Aborted, NOTHELD).
TEST(FakeWaitTest, AnAcquireAfterTheLeaseEndedIsFreshBeforeTheTimerRuns) {
  FakeLockEnv env;
  env.fake().SetAutoAdvance(false);  // time stands still unless moved
  const auto at_once = [&env] {
    return Deadline::After(absl::ZeroDuration(), &env.clock());
  };
  ASSERT_OK(lock::Acquire(env, "e", kMe, absl::Seconds(10), at_once(),
                          AcquireOptions()));
  // The lease ends; the timer thread is not told (no Poke()).
  env.fake_clock().Advance(absl::Seconds(10));
  EXPECT_OK(lock::Acquire(env, "e", kMe, absl::Seconds(10), at_once(),
                          AcquireOptions()));
  EXPECT_EQ(env.fake().CountOf(0, "e", env.Owner(kMe.number)), 1);
  EXPECT_EQ(env.metrics().Snapshot().reentries, 0u);
  EXPECT_OK(lock::Release(env, "e", kMe));
}

// --- What release answers from several nodes mean.

class ReleaseJudgementTest : public QuorumTallyTest {};

TEST_F(ReleaseJudgementTest, AQuorumOfReleasesIsOkEvenIfOneNodeLostIt) {
  ASSERT_OK(AcquireFor(env_, "j", absl::ZeroDuration()));
  fake().SetFault(2, FakeFault::kDown);
  ASSERT_OK(lock::Release(env_, "j", kMe));
  EXPECT_FALSE(env_.holds().Find("j", kMe.number).has_value());
}

TEST_F(ReleaseJudgementTest, AMajorityThatNoLongerHasItIsALostLease) {
  ASSERT_OK(AcquireFor(env_, "j", absl::ZeroDuration()));
  const std::string me = env_.Owner(kMe.number);
  // Two nodes lost it (their lease ran out; another owner took them).
  fake().Hold(0, "j", kOther, 1, kLease);
  fake().Hold(1, "j", kOther, 1, kLease);
  EXPECT_THAT(lock::Release(env_, "j", kMe),
              StatusIs(absl::StatusCode::kAborted,
                       HasSubstr("a majority of masters no longer have it")));
  // The other owner keeps what it took; node 2's stale copy is released.
  EXPECT_EQ(fake().CountOf(0, "j", kOther), 1);
  EXPECT_EQ(fake().CountOf(2, "j", me), 0);
  EXPECT_FALSE(env_.holds().Find("j", kMe.number).has_value());
}

TEST_F(ReleaseJudgementTest, NoQuorumOfAnswersIsUnavailableAndForgetsTheHold) {
  ASSERT_OK(AcquireFor(env_, "j", absl::ZeroDuration()));
  fake().SetFault(0, FakeFault::kDown);
  fake().SetFault(1, FakeFault::kSilent);
  EXPECT_THAT(lock::Release(env_, "j", kMe),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("no quorum of masters answered")));
  // The outermost release abandons the hold: never renewed again.
  EXPECT_FALSE(env_.holds().Find("j", kMe.number).has_value());
}

TEST_F(ReleaseJudgementTest, AReleaseOfALockNeverHeldIsFailedPrecondition) {
  EXPECT_THAT(lock::Release(env_, "never", kMe),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("not held by this thread")));
}

// --- The watchdog's renewal batch.

TEST(RenewalTest, EachItemIsRenewedGoneOrUndecided) {
  FakeLockEnv env(3);
  const std::string me = env.Owner(kMe.number);
  for (size_t node = 0; node < 3; ++node) {
    env.fake().Hold(node, "kept", me, 1, absl::Seconds(5));
  }
  env.fake().Hold(0, "lost", me, 1, absl::Seconds(5));  // on 1 of 3 only
  std::vector<watchdog::RenewItem> items(2);
  items[0].name = "kept";
  items[0].owner = me;
  items[1].name = "lost";
  items[1].owner = me;
  std::atomic<uint64_t> round_trips{0};
  watchdog::RenewResult r = lock::RenewHolds(env, items, &round_trips);
  EXPECT_OK(r.error);
  EXPECT_THAT(r.items, ElementsAre(watchdog::Renewal::kRenewed,
                                   watchdog::Renewal::kGone));
  EXPECT_EQ(round_trips.load(), 3u);  // one batch per node
  // The renewal set the watchdog lease on every node that had it.
  env.fake_clock().Advance(absl::Seconds(20));
  EXPECT_EQ(env.fake().CountOf(2, "kept", me), 1);

  // Two nodes silent: nothing is decided.
  env.fake().SetFault(1, FakeFault::kSilent);
  env.fake().SetFault(2, FakeFault::kDown);
  r = lock::RenewHolds(env, {items[0]}, &round_trips);
  EXPECT_THAT(r.items, ElementsAre(watchdog::Renewal::kUndecided));
  EXPECT_FALSE(r.error.ok());
}

// Regression (a split-brain trial: a new holder acquired on the promoted
// replica while the old holder's SafeUntil still said 5.9 s left): renewals
// ignored ReplicaSync. A renewal that Redis ran but that no replica
// acknowledged must not move the hold's safe end.

// A watchdog hold of "r" taken with ReplicaSync{1}; from then on node 0's
// renewals run but no replica acknowledges them.
void HoldWithUnacknowledgedRenewals(FakeLockEnv& env) {
  AcquireOptions options;
  options.replica_sync.replicas = 1;
  options.replica_sync.timeout = absl::Milliseconds(50);
  ASSERT_OK(lock::Acquire(env, "r", kMe, absl::nullopt,
                          Deadline::After(absl::ZeroDuration(), &env.clock()),
                          options));
  env.fake().SetResponder(
      0, [&env](const FakeCall& call, testing::FakeNode& node) {
        std::vector<std::pair<std::string, std::string>> published;
        backend::Answer a{node.Run(call, env.clock().Now(), &published)};
        if (call.script == internal::kRenewScript) a.acked = 0;
        return a;
      });
}

TEST(RenewalReplicaSyncTest,
     RenewalsIgnoredReplicaSyncAnUnacknowledgedRenewalDoesNotMoveSafeUntil) {
  FakeLockEnv env;
  ASSERT_NO_FATAL_FAILURE(HoldWithUnacknowledgedRenewals(env));
  const absl::StatusOr<SteadyClock::time_point> before =
      lock::SafeUntil(env, "r", kMe);
  ASSERT_OK(before);
  env.fake_clock().Advance(absl::Seconds(10));

  // The watchdog's batch: the renew script ran (Redis has the longer
  // lease), a WAIT followed it, and the renewal is undecided.
  std::vector<watchdog::RenewItem> due;
  std::vector<watchdog::LostHold> lost;
  watchdog::SweepRound sweep;
  sweep.now = env.clock().Now();
  sweep.due_by = sweep.now;
  sweep.period = absl::Seconds(10);
  sweep.all = true;
  env.holds().Sweep(sweep, &due, &lost);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].ack.replicas, 1);
  const SteadyClock::time_point sent_at = env.clock().Now();
  watchdog::RenewResult r = lock::RenewHolds(env, due, nullptr);
  EXPECT_THAT(r.items, ElementsAre(watchdog::Renewal::kUndecided));
  EXPECT_THAT(r.error,
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("only 0 of the 1 required replicas")));
  env.holds().ApplyRenewals(due, r.items, sent_at, &lost);
  EXPECT_TRUE(lost.empty());
  EXPECT_THAT(lock::SafeUntil(env, "r", kMe), testing::IsOkAndHolds(*before));

  // An explicit Extend() is judged the same way.
  EXPECT_THAT(lock::Extend(env, "r", kMe, absl::Minutes(5)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("not acknowledged by enough replicas")));
  EXPECT_THAT(lock::SafeUntil(env, "r", kMe), testing::IsOkAndHolds(*before));

  // Once the replicas acknowledge again, a renewal moves it.
  env.fake().SetResponder(0, nullptr);
  r = lock::RenewHolds(env, due, nullptr);
  EXPECT_THAT(r.items, ElementsAre(watchdog::Renewal::kRenewed));
  env.holds().ApplyRenewals(due, r.items, sent_at, &lost);
  const absl::StatusOr<SteadyClock::time_point> after =
      lock::SafeUntil(env, "r", kMe);
  ASSERT_OK(after);
  EXPECT_GT(*after, *before);
}

TEST(RenewalReplicaSyncTest,
     RenewalsIgnoredReplicaSyncTheHoldIsLostAtItsSafeEnd) {
  // The loss check at the hold's safe end reports it lost though Redis
  // kept renewing it: the holder is not told it holds what a failover
  // would lose.
  FakeLockEnv env;
  ASSERT_NO_FATAL_FAILURE(HoldWithUnacknowledgedRenewals(env));
  timer::TimerThread timers(&env.fake_clock());
  std::atomic<int> lost{0};
  watchdog::Watchdog dog(
      env.watchdog_lease(), &env.holds(), &timers,
      [&env](const std::vector<watchdog::RenewItem>& items) {
        return lock::RenewHolds(env, items, nullptr);
      },
      [&lost](const watchdog::LostHold&, const absl::Status&) { ++lost; },
      env.policy().Drift(env.watchdog_lease()));
  // Two rounds a third of the lease apart: each renewal runs, none counts.
  for (int i = 0; i < 2; ++i) {
    env.fake_clock().Advance(absl::Seconds(10));
    const watchdog::RoundStats stats = dog.RunRound(/*all=*/true);
    EXPECT_EQ(stats.renewed, 0u);
    EXPECT_TRUE(stats.failed);
  }
  EXPECT_EQ(env.fake().CallsOf(internal::kRenewScript), 2u);
  EXPECT_EQ(lost.load(), 0);
  // Past the safe end of the acquire (the last acknowledged write): the
  // loss check or the next round reports it, once.
  env.fake_clock().Advance(absl::Seconds(10));
  dog.RunRound(/*all=*/true);
  ASSERT_TRUE(testing::Eventually([&lost] { return lost.load() == 1; }));
  EXPECT_THAT(lock::SafeUntil(env, "r", kMe),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("lease lost")));
  // Redis still has the hold (renewed), yet its holder was told.
  EXPECT_EQ(env.fake().CountOf(0, "r", env.Owner(kMe.number)), 1);
  dog.Stop();
  timers.Shutdown();
}

// --- A closing client's release batch.

TEST(CloseBatchTest, HeldLocksAreReleasedAndLostOnesReportedAborted) {
  FakeLockEnv env;
  const std::string me = env.Owner(kMe.number);
  ASSERT_OK(AcquireFor(env, "held", absl::ZeroDuration()));
  ASSERT_OK(AcquireFor(env, "lost", absl::ZeroDuration()));
  env.fake().Hold(0, "lost", kOther, 1, kLease);  // taken over
  std::vector<std::pair<lock::HoldRegistry::Key, lock::Hold>> held;
  for (const std::string name : {"held", "lost"}) {
    absl::optional<lock::Hold> h = env.holds().Find(name, kMe.number);
    ASSERT_TRUE(h.has_value()) << name;
    held.emplace_back(lock::HoldRegistry::Key{name, kMe.number}, *h);
  }
  std::vector<absl::Status> out = lock::ReleaseHolds(
      env, held, Deadline::After(absl::Seconds(5), &env.clock()));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_OK(out[0]);
  EXPECT_THAT(out[1], StatusIs(absl::StatusCode::kAborted));
  EXPECT_EQ(env.fake().CountOf(0, "held", me), 0);
  EXPECT_EQ(env.fake().CountOf(0, "lost", kOther), 1);
}

// A release still unanswered when Close() stopped waiting for it: Close()
// took the hold, and its round came first. The release says so, rather than
// "not held by this thread" (the released-on-close event says whether the
// lease had been lost).
TEST(CloseBatchTest, AReleaseThatCloseOvertookSaysTheClientClosed) {
  FakeLockEnv env;
  ASSERT_OK(AcquireFor(env, "r", absl::ZeroDuration()));
  env.fake().SetResponder(0, [&](const FakeCall& call, testing::FakeNode&) {
    if (call.script != internal::kReleaseScript) {
      return backend::Answer{testing::IntReply(1)};
    }
    // Close() meanwhile: the hold taken, the lock released.
    env.set_closed(true);
    EXPECT_EQ(env.holds().TakeAll().size(), 1u);
    return backend::Answer{testing::NilReply()};  // not held
  });
  EXPECT_THAT(lock::Release(env, "r", kMe),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("closed while this release was under way")));
}

// The same for a permit (NotFound before).
TEST(CloseBatchTest, APermitReleaseThatCloseOvertookSaysTheClientClosed) {
  FakeLockEnv env;
  env.fake().SetResponder(
      0, [&](const FakeCall& call, testing::FakeNode&) -> backend::Answer {
        if (call.script == internal::kPermitAcquireScript) {
          return backend::Answer{testing::NilReply()};  // taken
        }
        if (call.script != internal::kPermitReleaseScript) {
          return backend::Answer{testing::IntReply(1)};
        }
        env.set_closed(true);
        EXPECT_EQ(env.holds().TakeAll().size(), 1u);
        return backend::Answer{testing::IntReply(0)};  // no such permit out
      });
  absl::StatusOr<std::string> id =
      lock::AcquirePermit(env, "p", absl::InfiniteDuration(),
                          Deadline::After(absl::Seconds(5), &env.clock()));
  ASSERT_OK(id);
  EXPECT_THAT(lock::ReleasePermit(env, "p", *id),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("closed while this release was under way")));
}

// Close() stopped waiting for a final release still in flight and took its
// hold; where the lock is gone, that release may have freed it: the error
// says so rather than only "lost".
TEST(CloseBatchTest, AReleaseStillInFlightMayHaveFreedTheLock) {
  FakeLockEnv env;
  ASSERT_OK(AcquireFor(env, "r", absl::ZeroDuration()));
  ASSERT_TRUE(env.holds().BeginRelease("r", kMe.number).has_value());
  env.fake().Hold(0, "r", kOther, 1, kLease);  // freed, and taken since
  const std::vector<std::pair<lock::HoldRegistry::Key, lock::Hold>> held =
      env.holds().TakeAll();
  ASSERT_EQ(held.size(), 1u);
  std::vector<absl::Status> out = lock::ReleaseHolds(
      env, held, Deadline::After(absl::Seconds(5), &env.clock()));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0], StatusIs(absl::StatusCode::kAborted,
                               HasSubstr("its own release, unanswered")));
}

// A final release whose outcome stays unknown while the client closes: the
// hold is left to Close()'s round (no longer in flight), not abandoned; the
// same for a permit. Once closed, a permit's release does not begin.
TEST(CloseBatchTest, AnUnansweredReleaseDuringCloseIsLeftToClose) {
  for (const bool permit : {false, true}) {
    FakeLockEnv env;
    env.fake().SetResponder(
        0, [&](const FakeCall& call, testing::FakeNode&) -> backend::Answer {
          if (call.script == internal::kPermitAcquireScript ||
              call.script == internal::kAcquireScript) {
            return backend::Answer{testing::NilReply()};  // taken
          }
          if (call.script != internal::kReleaseScript &&
              call.script != internal::kPermitReleaseScript) {
            return backend::Answer{testing::IntReply(1)};
          }
          env.set_closed(true);  // Close() begins meanwhile
          return backend::Answer{absl::UnavailableError("lost reply (fake)")};
        });
    std::string id;
    if (permit) {
      absl::StatusOr<std::string> got =
          lock::AcquirePermit(env, "p", absl::InfiniteDuration(),
                              Deadline::After(absl::Seconds(5), &env.clock()));
      ASSERT_OK(got);
      id = *got;
      EXPECT_THAT(lock::ReleasePermit(env, "p", id),
                  StatusIs(absl::StatusCode::kUnavailable));
    } else {
      ASSERT_OK(AcquireFor(env, "r", absl::ZeroDuration()));
      EXPECT_THAT(lock::Release(env, "r", kMe),
                  StatusIs(absl::StatusCode::kUnavailable));
    }
    EXPECT_TRUE(env.holds().AwaitReleases(absl::ZeroDuration())) << permit;
    if (permit) {
      EXPECT_THAT(lock::ReleasePermit(env, "p", id),
                  StatusIs(absl::StatusCode::kFailedPrecondition));
    }
    EXPECT_EQ(env.holds().TakeAll().size(), 1u) << permit;
  }
}

// --- The model's fencing tokens through the engine.

TEST(FencedEngineTest, EveryAcquisitionTakesTheNextToken) {
  FakeLockEnv env;
  AcquireOptions fenced;
  fenced.fenced = true;
  int64_t first = -1, second = -1;
  ASSERT_OK(AcquireFor(env, "f", absl::ZeroDuration(), fenced, &first));
  ASSERT_OK(AcquireFor(env, "f", absl::ZeroDuration(), fenced, &second));
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 2);  // a re-entry takes a token too (Redisson's rule)
  EXPECT_THAT(lock::LastToken(env, "f"), testing::IsOkAndHolds(2));
}

}  // namespace
}  // namespace relock
