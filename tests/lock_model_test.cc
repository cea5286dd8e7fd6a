// Each lock type's script calls (lib/lock/lock_model.h), without Redis:
// script, keys, arguments, channel and wake policy (the wire contract), and
// the texts a step borrows rather than copies. The scripts themselves run
// against a real server in data_model_test.cc and the API tests.
//
//   suite           what it pins
//   --------------  ----------------------------------------------------------
//   LeaseTest       a lease's wire form
//   OwnerFieldTest  an owner field's wire form
//   LockModelTest   each lock type's steps; StepTexts' borrowing

#include "lib/lock/lock_model.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/backend/backend.h"
#include "lib/lock/fair_lock.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "lib/lock/rw_lock.h"
#include "lib/pubsub/subscriber.h"

namespace relock {
namespace {

using lock::AcquireOptions;
using lock::Lease;
using lock::LockKind;
using lock::OwnerField;
using lock::Step;
using ::testing::ElementsAre;

constexpr absl::Duration kStepLease = absl::Seconds(30);

TEST(LeaseTest, TheWireFormIsWholeMillisecondsAndKeepIsZero) {
  EXPECT_EQ(Lease::Of(kStepLease).wire(), "30000");
  EXPECT_EQ(Lease::Of(absl::Microseconds(1500)).wire(), "1");
  EXPECT_EQ(Lease::Keep().wire(), "0");
}

TEST(OwnerFieldTest, IsTheClientIdAndTheNumberAndTheWritersHasASuffix) {
  EXPECT_EQ(OwnerField("id", 7).wire(), "id:7");
  EXPECT_EQ(OwnerField("id", 7 | lock::kWriteHoldBit).wire(), "id:7:write");
  EXPECT_EQ(OwnerField::None().wire(), "");
}

// A step's keys or arguments as strings, for the matchers (which, given
// views, may keep views of their own temporaries).
std::vector<std::string> Texts(const lock::StepTexts& texts) {
  std::vector<std::string> out;
  for (size_t i = 0; i < texts.size(); ++i) out.emplace_back(texts[i]);
  return out;
}

TEST(LockModelTest, ReentrantStepsAreRedissonsCalls) {
  const lock::LockName n("n");
  const OwnerField owner("id", 1);
  const lock::LockModel& m = lock::ReentrantModel();
  const Step fresh = m.Acquire(n, owner, Lease::Of(kStepLease), /*fresh=*/true,
                               /*queue=*/true, AcquireOptions(), "publish");
  EXPECT_EQ(fresh.script, internal::kAcquireScript);
  EXPECT_THAT(Texts(fresh.keys), ElementsAre("n", lock::FairQueueKey("n")));
  EXPECT_THAT(Texts(fresh.args), ElementsAre("30000", "id:1"));
  const Step again = m.Acquire(n, owner, Lease::Of(kStepLease), /*fresh=*/false,
                               /*queue=*/true, AcquireOptions(), "publish");
  EXPECT_THAT(Texts(again.keys), ElementsAre("n"));
  EXPECT_THAT(Texts(again.args), ElementsAre("30000", "id:1", "0"));
  AcquireOptions fenced;
  fenced.fenced = true;
  EXPECT_THAT(Texts(m.Acquire(n, owner, Lease::Of(kStepLease), true, true,
                              fenced, "publish")
                        .keys),
              ElementsAre("n", lock::FairQueueKey("n"), lock::TokenKey("n")));
  EXPECT_THAT(Texts(m.Acquire(n, owner, Lease::Of(kStepLease), false, true,
                              fenced, "publish")
                        .keys),
              ElementsAre("n", lock::TokenKey("n")));

  const Step inner =
      m.Release(n, owner, Lease::Keep(), "spublish", /*last=*/false);
  EXPECT_EQ(inner.script, internal::kReleaseScript);
  EXPECT_THAT(Texts(inner.keys),
              ElementsAre("n", "redisson_lock__channel:{n}"));
  EXPECT_THAT(Texts(inner.args), ElementsAre("0", "0", "id:1", "spublish"));
  EXPECT_THAT(
      Texts(m.Release(n, owner, Lease::Of(kStepLease), "publish", /*last=*/true)
                .keys),
      ElementsAre("n", "redisson_lock__channel:{n}", lock::FairQueueKey("n")));
  EXPECT_EQ(m.ReleaseAll(n, owner, "publish").script,
            internal::kReleaseAllScript);
  EXPECT_EQ(m.ForceRelease(n, "publish").script, internal::kForceReleaseScript);
  EXPECT_FALSE(m.Leave(n, owner, AcquireOptions(), true, "publish"));
  EXPECT_EQ(m.WaitChannel(n, owner), "redisson_lock__channel:{n}");
  EXPECT_EQ(m.wake_policy(), pubsub::WakePolicy::kWakeOne);
  EXPECT_EQ(m.renew_script(), internal::kRenewScript);
  EXPECT_EQ(m.Inspect(n, owner).script, internal::kInspectScript);
}

TEST(LockModelTest, StepTextsKeepTheirTextsThroughCopiesAndMoves) {
  const std::string borrowed = "a name that outlives the step";
  // A last text of 10 bytes keeps the owned texts inline; of 300, they go
  // to the heap.
  for (const size_t last : {10, 300}) {
    lock::StepTexts texts;
    texts.Borrow(borrowed);
    texts.Add("owned");
    texts.AddPrefixName("prefix", "n");
    texts.AddPrefixName("prefix", "{tag}n");
    texts.Add(std::string(last, 'x'));
    const lock::StepTexts copy = texts;
    const lock::StepTexts moved = std::move(texts);
    for (const lock::StepTexts* t : {&copy, &moved}) {
      ASSERT_EQ(t->size(), 5u);
      EXPECT_EQ((*t)[0], borrowed);
      EXPECT_EQ((*t)[0].data(), borrowed.data()) << "a borrowed text is a view";
      EXPECT_EQ((*t)[1], "owned");
      EXPECT_EQ((*t)[2], lock::PrefixName("prefix", "n"));
      EXPECT_EQ((*t)[3], lock::PrefixName("prefix", "{tag}n"));
      EXPECT_EQ((*t)[4], std::string(last, 'x'));
    }
  }
}

TEST(LockModelTest, ReentrantAcquireAndReleaseBorrowTheNameAndOwner) {
  const std::string key = "a-lock-name-longer-than-sso";
  const lock::LockName n(key);
  const OwnerField owner("00000000-0000-4000-8000-000000000000", 1);
  const lock::LockModel& m = lock::ReentrantModel();
  const Step acquire =
      m.Acquire(n, owner, Lease::Of(kStepLease), /*fresh=*/true,
                /*queue=*/true, AcquireOptions(), "publish");
  const Step release =
      m.Release(n, owner, Lease::Keep(), "publish", /*last=*/true);
  for (const Step* step : {&acquire, &release}) {
    const backend::Call views = step->Views();
    EXPECT_EQ(views.keys[0].data(), key.data());
    EXPECT_TRUE(std::any_of(
        views.args.begin(), views.args.end(),
        [&](absl::string_view a) { return a.data() == owner.wire().data(); }));
  }
}

TEST(LockModelTest, FairStepsCarryTheQueueAndWaitOnTheirOwnChannel) {
  const lock::LockName n("n");
  const OwnerField owner("id", 1);
  const lock::LockModel& m = lock::ModelOf(LockKind::kFair);
  EXPECT_EQ(m.kind(), LockKind::kFair);
  AcquireOptions options;
  options.queue_wait = absl::Seconds(5);
  const Step acquire =
      m.Acquire(n, owner, Lease::Of(kStepLease), /*fresh=*/true,
                /*queue=*/false, options, "publish");
  EXPECT_EQ(acquire.script, internal::kFairAcquireScript);
  EXPECT_THAT(Texts(acquire.keys),
              ::testing::Contains(lock::FairQueueKey("n")));
  EXPECT_THAT(Texts(acquire.keys),
              ::testing::Contains(lock::FairTimeoutKey("n")));
  EXPECT_THAT(Texts(acquire.args),
              ElementsAre("30000", "id:1", "5000", "1", "0", "publish"));
  const absl::optional<Step> leave =
      m.Leave(n, owner, options, /*fresh=*/false, "publish");
  ASSERT_TRUE(leave.has_value());
  EXPECT_EQ(leave->script, internal::kFairLeaveScript);
  EXPECT_EQ(m.WaitChannel(n, owner), "redisson_lock__channel:{n}:id:1");
  EXPECT_EQ(m.wake_policy(), pubsub::WakePolicy::kWakeOne);
  EXPECT_LT(m.max_sleep(), absl::InfiniteDuration());
}

TEST(LockModelTest, ReadAndWriteLocksShareOneHashAndOneChannel) {
  const lock::LockName n("n");
  const OwnerField owner("id", 1);
  const lock::LockModel& read = lock::ModelOf(LockKind::kRead);
  const lock::LockModel& write = lock::ModelOf(LockKind::kWrite);
  EXPECT_EQ(read.Acquire(n, owner, Lease::Of(kStepLease), true, true,
                         AcquireOptions(), "publish")
                .script,
            internal::kReadAcquireScript);
  EXPECT_EQ(write
                .Acquire(n, owner, Lease::Of(kStepLease), true, true,
                         AcquireOptions(), "publish")
                .script,
            internal::kWriteAcquireScript);
  EXPECT_EQ(read.WaitChannel(n, owner), lock::ReadWriteChannel("n"));
  EXPECT_EQ(write.WaitChannel(n, owner), lock::ReadWriteChannel("n"));
  EXPECT_EQ(read.wake_policy(), pubsub::WakePolicy::kReadWrite);
  // Redisson's messages: a write release wakes every waiter ("1": the
  // readers may all go), a read release one ("0").
  EXPECT_EQ(write.Release(n, owner, Lease::Keep(), "publish", true).args[0],
            "1");
  EXPECT_EQ(read.Release(n, owner, Lease::Keep(), "publish", true).args[0],
            "0");
  EXPECT_EQ(read.renew_script(), internal::kReadRenewScript);
  EXPECT_EQ(write.Inspect(n, owner).args[1], "write");
  EXPECT_EQ(read.ForceRelease(n, "publish").args[0], "read");
}

}  // namespace
}  // namespace relock
