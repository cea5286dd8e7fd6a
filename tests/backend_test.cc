// The backend seam's asynchronous calls (lib/backend/) against a real
// redis-server: RunAsync's answers, its deadline on the loop's timer, the
// `only` mask, and the loop timer itself.

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/node_backend.h"
#include "lib/backend/routed_backend.h"
#include "lib/common/observer.h"
#include "lib/io/event_loop.h"
#include "lib/lock/lock_scripts.h"
#include "lib/redis/url.h"
#include "tests/test_util.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace backend {
namespace {

using ::relock::testing::RedisServer;
using ::relock::testing::Stopwatch;

constexpr absl::Duration kLong = absl::Seconds(10);

// A result delivered on another thread, and whether it came on the loop.
template <class T>
class Delivered {
 public:
  void Set(T value, bool on_loop) {
    MutexLock lock(&mu_);
    value_ = std::move(value);
    on_loop_ = on_loop;
    set_ = true;
  }
  // Waits up to kLong; false if nothing came.
  bool Await() {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&set_), kLong);
  }
  T Take() {
    MutexLock lock(&mu_);
    return std::move(value_);
  }
  bool on_loop() {
    MutexLock lock(&mu_);
    return on_loop_;
  }

 private:
  Mutex mu_;
  bool set_ ABSL_GUARDED_BY(mu_) = false;
  bool on_loop_ ABSL_GUARDED_BY(mu_) = false;
  T value_ ABSL_GUARDED_BY(mu_){};
};

class BackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
    ASSERT_OK(server);
    server_ = *std::move(server);
    NodeOptions o;
    absl::StatusOr<redis::Endpoint> ep = redis::ParseRedisUrl(server_->url());
    ASSERT_OK(ep);
    o.connection.endpoint = *ep;
    o.connection.command_timeout = absl::Seconds(5);
    absl::StatusOr<std::unique_ptr<NodeBackend>> node =
        NodeBackend::Create(&loop_, o, ::relock::internal::LockScripts());
    ASSERT_OK(node);
    node_ = *std::move(node);
  }
  void TearDown() override {
    if (node_ != nullptr) node_->Close();
    loop_.Stop();
  }

  // The inspect script on `key` (a lock-shaped read: {held, pttl, count}).
  void Inspect(const std::string& key, Deadline deadline,
               Delivered<std::vector<Answer>>* out,
               const std::vector<bool>* only = nullptr) {
    const absl::string_view keys[] = {key};
    const absl::string_view args[] = {"owner"};
    io::EventLoop* loop = &loop_;
    ScriptCall call;
    call.script = ::relock::internal::kInspectScript;
    call.keys = keys;
    call.args = args;
    call.deadline = deadline;
    call.resend = Resend::kIfDropped;
    call.only = only;
    node_->RunAsync(std::move(call), [out, loop](std::vector<Answer> answers) {
      out->Set(std::move(answers), loop->InLoopThread());
    });
  }

  std::unique_ptr<RedisServer> server_;
  io::EventLoop loop_;  // before node_: destroyed after it
  std::unique_ptr<NodeBackend> node_;
};

TEST_F(BackendTest, RunAsyncAnswersOnTheLoopThread) {
  Delivered<std::vector<Answer>> got;
  Inspect("free-key", Deadline::After(kLong), &got);
  ASSERT_TRUE(got.Await());
  std::vector<Answer> answers = got.Take();
  ASSERT_EQ(answers.size(), 1u);
  ASSERT_OK(answers[0].reply);
  EXPECT_TRUE(answers[0].reply->view().is_array());
  EXPECT_TRUE(got.on_loop());
}

TEST_F(BackendTest, RunAsyncEndsAtItsDeadlineWhenRedisIsPaused) {
  ASSERT_OK(server_->Pause());
  Stopwatch watch;
  Delivered<std::vector<Answer>> got;
  Inspect("k", Deadline::After(absl::Milliseconds(200)), &got);
  ASSERT_TRUE(got.Await());
  const absl::Duration took = watch.Elapsed();
  ASSERT_OK(server_->Resume());
  std::vector<Answer> answers = got.Take();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].reply.status().code(),
            absl::StatusCode::kDeadlineExceeded)
      << answers[0].reply.status();
  EXPECT_GE(took, absl::Milliseconds(190));
  EXPECT_LT(took, absl::Seconds(3));  // the deadline, not command_timeout
}

TEST_F(BackendTest, RunAsyncSendsNothingToNodesOutsideOnly) {
  const std::vector<bool> none = {false};
  Delivered<std::vector<Answer>> got;
  Inspect("k", Deadline::After(kLong), &got, &none);
  ASSERT_TRUE(got.Await());
  EXPECT_EQ(got.Take()[0].reply.status().code(), absl::StatusCode::kCancelled);
}

TEST_F(BackendTest, ATimerFiresOnTheLoopAndACancelledOneDoesNot) {
  std::unique_ptr<Timer> cancelled = node_->NewTimer();
  std::unique_ptr<Timer> timer = node_->NewTimer();
  Delivered<int> first, second;
  io::EventLoop* loop = &loop_;
  cancelled->At(Deadline::After(absl::Milliseconds(50)),
                [&first, loop] { first.Set(1, loop->InLoopThread()); });
  cancelled->Cancel();
  // Fires after the cancelled one would have: if the cancel did not hold,
  // `first` is set by the time `second` is.
  timer->At(Deadline::After(absl::Milliseconds(150)),
            [&second, loop] { second.Set(2, loop->InLoopThread()); });
  ASSERT_TRUE(second.Await());
  EXPECT_TRUE(second.on_loop());
  EXPECT_EQ(first.Take(), 0);
}

// A routed backend whose refreshes the test starts and ends by hand.
class HandRefreshed final : public RoutedBackend {
 public:
  explicit HandRefreshed(io::EventLoop* loop, NodeOptions node = {})
      : RoutedBackend(loop, std::move(node), {}, "hand-refreshed") {}
  ~HandRefreshed() override { Close(); }
  int started() const { return started_.load(); }
  void Done() { RefreshDone(); }
  // Installs a map whose every slot `url`'s server serves.
  void InstallMaster(const std::string& url) {
    absl::StatusOr<redis::Endpoint> at = redis::ParseRedisUrl(url);
    ASSERT_OK(at);
    Install(redis::SlotMap::OneMaster(*at));
  }

 private:
  void StartRefresh() override { started_.fetch_add(1); }
  std::atomic<int> started_{0};
};

// A refresh asked for while one runs (Sentinel's +switch-master while a
// periodic refresh waits for a sentinel that answered before the switch)
// runs once that one is done, instead of being dropped; several such asks
// make one more refresh, not several.
TEST(RoutedBackendTest, ARefreshAskedForWhileOneRunsRunsAfterIt) {
  io::EventLoop loop;
  HandRefreshed backend(&loop);
  backend.RefreshSoon();
  EXPECT_EQ(backend.started(), 1);
  backend.RefreshSoon();  // while the first runs
  backend.RefreshSoon();
  EXPECT_EQ(backend.started(), 1);
  backend.Done();
  EXPECT_EQ(backend.started(), 2);  // the asked-for one
  backend.Done();
  EXPECT_EQ(backend.started(), 2);  // nothing more was asked for
  backend.RefreshSoon();
  EXPECT_EQ(backend.started(), 3);
  backend.Done();
  loop.Stop();
}

// A slot that another master serves now (a failover, or a resharding) is
// news for the client's watchdog, which renews every lease then
// (Observer::on_reconnect): the new master may lack the last locks. The
// first map and one with the same masters are not.
TEST(RoutedBackendTest, ANewMasterRunsTheReconnectHook) {
  io::EventLoop loop;
  auto observer = std::make_shared<Observer>();
  std::atomic<int> told{0};
  observer->on_reconnect.Set([&told] { told.fetch_add(1); });
  NodeOptions node;
  node.connection.observer = observer;
  {
    HandRefreshed backend(&loop, node);
    backend.InstallMaster("redis://127.0.0.1:1");
    EXPECT_EQ(told.load(), 0);
    backend.InstallMaster("redis://127.0.0.1:1");
    EXPECT_EQ(told.load(), 0);
    backend.InstallMaster("redis://127.0.0.1:2");
    EXPECT_EQ(told.load(), 1);
  }
  observer->on_reconnect.Set(nullptr);
  loop.Stop();
}

}  // namespace
}  // namespace backend
}  // namespace relock
