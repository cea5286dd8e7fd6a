// The pub/sub subscriber on the event loop (lib/pubsub/), against a real
// redis-server: what one message wakes under each wake policy, and the
// resubscription after the server drops the connection.

#include "lib/pubsub/subscriber.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/io/event_loop.h"
#include "lib/redis/url.h"
#include "tests/test_util.h"
#include "tests/testing/notification.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace pubsub {
namespace {

using ::relock::testing::RedisServer;

constexpr absl::Duration kLong = absl::Seconds(10);  // a wake that must come
// How long a waiter that must not wake is watched.
constexpr absl::Duration kQuiet = absl::Milliseconds(300);

class SubscriberTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
    ASSERT_OK(server);
    server_ = *std::move(server);
    io::ConnectionOptions o;
    absl::StatusOr<redis::Endpoint> ep = redis::ParseRedisUrl(server_->url());
    ASSERT_OK(ep);
    o.endpoint = *ep;
    absl::StatusOr<std::shared_ptr<Subscriber>> sub =
        Subscriber::Start(&loop_, o);
    ASSERT_OK(sub);
    subscriber_ = *std::move(sub);
  }
  void TearDown() override {
    if (subscriber_ != nullptr) subscriber_->Close();
    loop_.Stop();
  }

  std::unique_ptr<Subscription> Subscribe(WakePolicy policy,
                                          const std::string& waiter = "") {
    std::unique_ptr<Subscription> s =
        subscriber_->Subscribe(kChannel, nullptr, policy, waiter);
    EXPECT_OK(s->AwaitConfirmed(Deadline::After(kLong)));
    return s;
  }
  // PUBLISH through a plain connection; returns the receivers Redis counted.
  int64_t Publish(const std::string& message) {
    absl::StatusOr<testing::RedisValue> n =
        server_->Command({"PUBLISH", kChannel, message});
    EXPECT_OK(n);
    return n.ok() ? n->integer : -1;
  }
  static WakeReason WaitLong(Subscription& s) {
    return s.Wait(Deadline::After(kLong));
  }
  static WakeReason WaitQuiet(Subscription& s) {
    return s.Wait(Deadline::After(kQuiet));
  }

  static constexpr const char* kChannel = "redisson_lock__channel:{test}";
  std::unique_ptr<RedisServer> server_;
  // Declared before the subscriber, so destroyed after it.
  io::EventLoop loop_;
  std::shared_ptr<Subscriber> subscriber_;
};

TEST_F(SubscriberTest, AnUnlockMessageWakesExactlyOneWakeOneWaiter) {
  std::unique_ptr<Subscription> a = Subscribe(WakePolicy::kWakeOne);
  std::unique_ptr<Subscription> b = Subscribe(WakePolicy::kWakeOne);
  EXPECT_EQ(Publish("0"), 1);  // one server subscription for both
  // One of them takes the permit; the other stays asleep.
  const WakeReason first = WaitLong(*a);
  ASSERT_EQ(first, WakeReason::kNotified);
  EXPECT_EQ(WaitQuiet(*b), WakeReason::kTimeout);
  EXPECT_EQ(Publish("0"), 1);
  EXPECT_EQ(WaitLong(*b), WakeReason::kNotified);
  // A message that is not the unlock message wakes no wake-one waiter.
  EXPECT_EQ(Publish("1"), 1);
  EXPECT_EQ(WaitQuiet(*a), WakeReason::kTimeout);
}

TEST_F(SubscriberTest, AMessageWakesEveryWakeAllWaiter) {
  std::vector<std::unique_ptr<Subscription>> subs;
  for (int i = 0; i < 3; ++i) subs.push_back(Subscribe(WakePolicy::kWakeAll));
  EXPECT_EQ(Publish("1"), 1);
  for (auto& s : subs) EXPECT_EQ(WaitLong(*s), WakeReason::kNotified);
  // Each saw it once.
  for (auto& s : subs) EXPECT_EQ(WaitQuiet(*s), WakeReason::kTimeout);
}

TEST_F(SubscriberTest, ANamedMessageWakesOnlyTheWaiterOfThatName) {
  std::unique_ptr<Subscription> a = Subscribe(WakePolicy::kWakeNamed, "a");
  std::unique_ptr<Subscription> b = Subscribe(WakePolicy::kWakeNamed, "b");
  std::unique_ptr<Subscription> one = Subscribe(WakePolicy::kWakeOne);
  EXPECT_EQ(Publish("b"), 1);
  EXPECT_EQ(WaitLong(*b), WakeReason::kNotified);
  EXPECT_EQ(WaitQuiet(*a), WakeReason::kTimeout);
  EXPECT_EQ(WaitQuiet(*one), WakeReason::kTimeout);
  EXPECT_EQ(Publish("0"), 1);
  EXPECT_EQ(WaitLong(*one), WakeReason::kNotified);
  EXPECT_EQ(WaitQuiet(*a), WakeReason::kTimeout);
  EXPECT_EQ(WaitQuiet(*b), WakeReason::kTimeout);
}

TEST_F(SubscriberTest, ADroppedConnectionIsReplacedAndWaitersReCheck) {
  std::unique_ptr<Subscription> s = Subscribe(WakePolicy::kWakeOne);
  ASSERT_OK(server_->Command({"CLIENT", "KILL", "TYPE", "pubsub"}));
  // Messages sent while disconnected are lost: the waiter is told to
  // re-check, then is confirmed on the new connection and woken again.
  EXPECT_EQ(WaitLong(*s), WakeReason::kResubscribed);
  ASSERT_OK(s->AwaitConfirmed(Deadline::After(kLong)));
  EXPECT_EQ(Publish("0"), 1);
  EXPECT_EQ(WaitLong(*s), WakeReason::kNotified);
}

TEST_F(SubscriberTest, CloseWakesWaitersWithClosed) {
  std::unique_ptr<Subscription> s = Subscribe(WakePolicy::kWakeAll);
  subscriber_->Close();
  EXPECT_EQ(WaitLong(*s), WakeReason::kClosed);
  EXPECT_EQ(s->AwaitConfirmed(Deadline::After(kQuiet)).code(),
            absl::StatusCode::kCancelled);
}

// A waiter that does not block is told, on the loop thread, of its
// confirmation, of a message (and then takes the permit with a look), and of
// the close.
TEST_F(SubscriberTest, AListenerIsToldOfConfirmationMessagesAndClose) {
  struct Seen {
    Mutex mu;
    int calls ABSL_GUARDED_BY(mu) = 0;
    bool off_loop ABSL_GUARDED_BY(mu) = false;
  } seen;
  io::EventLoop* loop = &loop_;
  auto await_calls = [&seen](int n) {
    MutexLock lock(&seen.mu);
    auto enough = [&seen, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return seen.calls >= n;
    };
    return seen.mu.AwaitWithTimeout(absl::Condition(&enough), kLong);
  };
  std::unique_ptr<Subscription> s = subscriber_->Subscribe(
      kChannel, nullptr, WakePolicy::kWakeOne, "", [&seen, loop] {
        MutexLock lock(&seen.mu);
        ++seen.calls;
        seen.off_loop = seen.off_loop || !loop->InLoopThread();
      });
  const Deadline look = Deadline::After(absl::ZeroDuration());
  ASSERT_TRUE(await_calls(1));  // the SUBSCRIBE was confirmed
  EXPECT_OK(s->AwaitConfirmed(look));
  EXPECT_EQ(s->Wait(look), WakeReason::kTimeout);  // nothing yet
  int before = 0;
  {
    MutexLock lock(&seen.mu);
    before = seen.calls;
  }
  EXPECT_EQ(Publish("0"), 1);
  ASSERT_TRUE(await_calls(before + 1));
  EXPECT_EQ(s->Wait(look), WakeReason::kNotified);  // the permit, at once
  EXPECT_EQ(s->Wait(look), WakeReason::kTimeout);
  {
    MutexLock lock(&seen.mu);
    before = seen.calls;
  }
  subscriber_->Close();
  ASSERT_TRUE(await_calls(before + 1));
  EXPECT_EQ(s->Wait(look), WakeReason::kClosed);
  MutexLock lock(&seen.mu);
  EXPECT_FALSE(seen.off_loop);
}

// No herd: an unlock message tells one waiting listener, the first to have
// found no permit; a permit its listener leaves unconsumed (it went away)
// goes on to the next; a waiter that consumed its permit is not told again
// until it waits again.
TEST_F(SubscriberTest, AnUnlockMessageTellsOneWaitingListenerInTurn) {
  constexpr int kWaiters = 3;
  struct Seen {
    Mutex mu;
    int calls[kWaiters] ABSL_GUARDED_BY(mu) = {};
  } seen;
  std::vector<std::unique_ptr<Subscription>> subs;
  for (int i = 0; i < kWaiters; ++i) {
    subs.push_back(subscriber_->Subscribe(kChannel, nullptr,
                                          WakePolicy::kWakeOne, "", [&seen, i] {
                                            MutexLock lock(&seen.mu);
                                            ++seen.calls[i];
                                          }));
  }
  const Deadline look = Deadline::After(absl::ZeroDuration());
  for (auto& s : subs) {
    ASSERT_OK(s->AwaitConfirmed(Deadline::After(kLong)));
  }
  // What each listener was told since the last call, once everything the
  // loop was asked to do before has run. Its posts run in order; twice, for
  // what a handler that was running at the first post posts after it.
  std::vector<int> before(kWaiters);
  auto told = [&] {
    for (int round = 0; round < 2; ++round) {
      testing::Notification flushed;
      loop_.Post([&flushed] { flushed.Notify(); });
      EXPECT_TRUE(flushed.WaitForNotificationWithTimeout(kLong));
    }
    MutexLock lock(&seen.mu);
    std::vector<int> out(kWaiters);
    for (int i = 0; i < kWaiters; ++i) {
      out[i] = seen.calls[i] - before[i];
      before[i] = seen.calls[i];
    }
    return out;
  };
  told();  // the confirmations told everyone
  for (auto& s : subs) EXPECT_EQ(s->Wait(look), WakeReason::kTimeout);

  // Published: only the first waiter hears; it takes the permit.
  ASSERT_EQ(Publish("0"), 1);
  // What the listeners were told once listener `i` was (the message is on
  // its way).
  auto told_once = [&](int i) {
    std::vector<int> sum(kWaiters);
    testing::Eventually(
        [&] {
          std::vector<int> got = told();
          for (int j = 0; j < kWaiters; ++j) sum[j] += got[j];
          return sum[i] != 0;
        },
        kLong);
    return sum;
  };
  std::vector<int> got = told_once(0);
  EXPECT_EQ(got, (std::vector<int>{1, 0, 0}));
  EXPECT_EQ(subs[0]->Wait(look), WakeReason::kNotified);

  // The second waiter is told, but goes away without looking: its permit
  // goes on to the third.
  ASSERT_EQ(Publish("0"), 1);
  EXPECT_EQ(told_once(1), (std::vector<int>{0, 1, 0}));
  subs[1].reset();
  EXPECT_EQ(told(), (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(subs[2]->Wait(look), WakeReason::kNotified);

  // Nobody is waiting (both consumed their permits): the next permit waits
  // for whoever looks first, and nobody is told.
  ASSERT_EQ(Publish("0"), 1);
  EXPECT_EQ(subs[2]->Wait(Deadline::After(kLong)), WakeReason::kNotified);
  EXPECT_EQ(told(), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(subs[0]->Wait(look), WakeReason::kTimeout);
}

// Sharded pub/sub (Redis >= 7, which also serves it without cluster mode):
// SSUBSCRIBE, woken by SPUBLISH and not by a classic PUBLISH; the channel is
// unsubscribed with SUNSUBSCRIBE when the last waiter goes, and a later
// subscription works again (our own SUNSUBSCRIBE's reply is no "moved" push).
TEST_F(SubscriberTest, ShardedModeListensToSpublish) {
  io::ConnectionOptions o;
  absl::StatusOr<redis::Endpoint> ep = redis::ParseRedisUrl(server_->url());
  ASSERT_OK(ep);
  o.endpoint = *ep;
  absl::StatusOr<std::shared_ptr<Subscriber>> started =
      Subscriber::Start(&loop_, o, true, Subscriber::Mode::kSharded);
  ASSERT_OK(started);
  std::shared_ptr<Subscriber> sharded = *std::move(started);
  for (int round = 0; round < 2; ++round) {
    std::unique_ptr<Subscription> s =
        sharded->Subscribe(kChannel, nullptr, WakePolicy::kWakeOne);
    ASSERT_OK(s->AwaitConfirmed(Deadline::After(kLong)));
    EXPECT_EQ(Publish("0"), 0);  // classic: nobody listens
    EXPECT_EQ(WaitQuiet(*s), WakeReason::kTimeout);
    absl::StatusOr<testing::RedisValue> n =
        server_->Command({"SPUBLISH", kChannel, "0"});
    ASSERT_OK(n);
    EXPECT_EQ(n->integer, 1);
    EXPECT_EQ(WaitLong(*s), WakeReason::kNotified);
    s.reset();  // SUNSUBSCRIBE
    EXPECT_OK(testing::WaitForSubscribers(*server_, kChannel, 0,
                                          testing::PubSub::kSharded));
  }
  sharded->Close();
}

}  // namespace
}  // namespace pubsub
}  // namespace relock
