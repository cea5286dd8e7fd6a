// relock demo: a small threaded "order service".
//
// Worker threads take requests from a queue. Each request places an order:
// PlaceOrder() locks "demo:order:<id>" and calls Reserve(), which locks the
// same order again (reentrancy in a call chain) and then the customer's
// account lock. Several workers get requests for the same orders, so they
// contend and wait for each other, woken by relock's unlock notifications.
// Every critical section does a non-atomic read-modify-write of a counter; at
// the end the demo checks that no update was lost.
//
//   demo                       start a private redis-server (unix socket in
//                              a temp dir), run, stop it
//   demo redis://host:port     use that Redis instead
//   demo --requests=N --workers=N
//
// Exit status 0 when every check passed.

#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "relock/relock.h"

extern char** environ;

namespace {

// --- A private redis-server, for when no address is given. ----------------

class PrivateRedis {
 public:
  ~PrivateRedis() { Stop(); }

  // Starts redis-server on a unix socket in a fresh temp dir (no TCP port, no
  // persistence). Returns the URL or an error.
  absl::StatusOr<std::string> Start() {
    char dir_template[] = "/tmp/relock-demo-XXXXXX";
    if (mkdtemp(dir_template) == nullptr) {
      return absl::InternalError("mkdtemp failed");
    }
    dir_ = dir_template;
    socket_ = dir_ + "/redis.sock";
    std::vector<std::string> args = {"redis-server",
                                     "--port",
                                     "0",
                                     "--unixsocket",
                                     socket_,
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--dir",
                                     dir_,
                                     "--logfile",
                                     dir_ + "/redis.log"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawnp(&pid_, "redis-server", nullptr, nullptr, argv.data(),
                     environ) != 0) {
      pid_ = -1;
      return absl::NotFoundError(
          "cannot run redis-server (install it: apt-get install redis-server, "
          "or pass a redis:// URL)");
    }
    return absl::StrCat("unix://", socket_);
  }

  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
      std::cout << "stopped the private redis-server\n";
    }
    if (!dir_.empty()) {
      unlink(socket_.c_str());
      unlink((dir_ + "/redis.log").c_str());
      rmdir(dir_.c_str());
      dir_.clear();
    }
  }

 private:
  pid_t pid_ = -1;
  std::string dir_;
  std::string socket_;
};

// --- The "service". ---------------------------------------------------------

struct Request {
  int id;
  int order;
  int account;
};

class OrderService {
 public:
  OrderService(relock::Client& client, int workers)
      : client_(client), workers_(workers) {}

  void Log(int worker, const std::string& line) {
    std::lock_guard<std::mutex> lock(log_mu_);
    std::cout << absl::StrFormat("[worker %d] %s\n", worker, line);
  }

  // Locks the order, then reserves (which locks it again).
  void PlaceOrder(int worker, const Request& r) {
    relock::Lock order = client_.GetLock(absl::StrCat("demo:order:", r.order));
    const absl::Time start = absl::Now();
    std::lock_guard<relock::Lock> guard(order);  // may wait for other workers
    const absl::Duration waited = absl::Now() - start;
    RecordWait(waited);
    if (waited > absl::Milliseconds(1)) {
      Log(worker, absl::StrFormat("request %d: order:%d was busy, waited %s",
                                  r.id, r.order, FormatMs(waited)));
    }
    Reserve(worker, r, order);
  }

  // Called with the order lock held; locks it again (reentrant), then the
  // account.
  void Reserve(int worker, const Request& r, relock::Lock& order) {
    std::lock_guard<relock::Lock> again(order);
    absl::StatusOr<int64_t> holds = order.HoldCount();
    if (!holds.ok() || *holds != 2) {
      Log(worker, absl::StrCat("UNEXPECTED hold count ",
                               holds.ok() ? absl::StrCat(*holds)
                                          : holds.status().ToString()));
      failures_.fetch_add(1);
    }
    relock::Lock account =
        client_.GetLock(absl::StrCat("demo:account:", r.account));
    const absl::Time start = absl::Now();
    std::lock_guard<relock::Lock> account_guard(account);
    const absl::Duration waited = absl::Now() - start;
    RecordWait(waited);
    if (waited > absl::Milliseconds(1)) {
      Log(worker,
          absl::StrFormat("request %d: account:%d was busy, waited %s (holding "
                          "order:%d)",
                          r.id, r.account, FormatMs(waited), r.order));
    }
    // Non-atomic read-modify-write, safe only under the order lock.
    int before = orders_[r.order];
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    orders_[r.order] = before + 1;
    if (r.id % 15 == 0) {
      Log(worker,
          absl::StrFormat("request %d: order:%d reserved (order lock held %d "
                          "times by this thread, account:%d locked)",
                          r.id, r.order, *holds, r.account));
    }
  }

  void RecordWait(absl::Duration d) {
    std::lock_guard<std::mutex> lock(log_mu_);
    if (d > max_wait_) max_wait_ = d;
  }

  static std::string FormatMs(absl::Duration d) {
    return absl::StrFormat("%.1f ms", absl::ToDoubleMilliseconds(d));
  }

  int Run(int requests, int orders) {
    std::deque<Request> queue;
    for (int i = 1; i <= requests; ++i) {
      queue.push_back({i, i % orders, i % 2});
    }
    for (int o = 0; o < orders; ++o) orders_[o] = 0;
    std::mutex queue_mu;
    std::vector<std::thread> threads;
    const absl::Time start = absl::Now();
    for (int w = 1; w <= workers_; ++w) {
      threads.emplace_back([&, w] {
        while (true) {
          Request r;
          {
            std::lock_guard<std::mutex> g(queue_mu);
            if (queue.empty()) return;
            r = queue.front();
            queue.pop_front();
          }
          try {
            PlaceOrder(w, r);
          } catch (const relock::LockError& e) {
            Log(w, absl::StrCat("request ", r.id, " failed: ", e.what()));
            failures_.fetch_add(1);
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    const absl::Duration took = absl::Now() - start;

    int total = 0;
    for (auto& [order, count] : orders_) total += count;
    std::cout << "\n"
              << absl::StrFormat(
                     "%d requests by %d workers on %d orders in %s; %d lock "
                     "acquisitions waited for another worker (longest %s; "
                     "the client's waits_total below)\n",
                     requests, workers_, orders, FormatMs(took),
                     client_.Metrics().waits, FormatMs(max_wait_));
    bool ok = total == requests && failures_.load() == 0;
    std::cout << absl::StrFormat(
        "orders updated %d times for %d requests: %s\n", total, requests,
        total == requests ? "no update lost (the locks excluded each other)"
                          : "UPDATES LOST");
    for (int o = 0; o < orders; ++o) {
      relock::Lock lock = client_.GetLock(absl::StrCat("demo:order:", o));
      absl::StatusOr<bool> locked = lock.IsLocked();
      if (!locked.ok() || *locked) {
        std::cout << "order lock " << o << " left behind!\n";
        ok = false;
      }
    }
    std::cout << (ok ? "OK: all locks released, every check passed\n"
                     : "FAILED\n");
    return ok ? 0 : 1;
  }

 private:
  relock::Client& client_;
  const int workers_;
  std::mutex log_mu_;  // guards the log and max_wait_
  absl::Duration max_wait_;
  std::atomic<int> failures_{0};
  std::map<int, int> orders_;  // guarded by the Redis order locks
};

}  // namespace

int main(int argc, char** argv) {
  std::string url;
  int requests = 30, workers = 4;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--requests=")) {
      if (!absl::SimpleAtoi(arg, &requests) || requests < 1) return 2;
    } else if (absl::ConsumePrefix(&arg, "--workers=")) {
      if (!absl::SimpleAtoi(arg, &workers) || workers < 1) return 2;
    } else if (arg == "--help" || arg == "-h") {
      std::cout << "usage: demo [redis://host:port | unix:///path] "
                   "[--requests=N] [--workers=N]\n";
      return 0;
    } else {
      url = std::string(arg);
    }
  }

  PrivateRedis private_redis;
  if (url.empty()) {
    absl::StatusOr<std::string> started = private_redis.Start();
    if (!started.ok()) {
      std::cerr << "demo: " << started.status() << "\n";
      return 1;
    }
    url = *started;
    std::cout << "started a private redis-server at " << url << "\n";
  }

  relock::ClientOptions options;
  options.url = url;
  absl::StatusOr<std::unique_ptr<relock::Client>> client =
      relock::Client::Connect(options);
  for (int attempt = 0; !client.ok() && attempt < 100; ++attempt) {
    absl::SleepFor(absl::Milliseconds(50));  // the server is starting
    client = relock::Client::Connect(options);
  }
  if (!client.ok()) {
    std::cerr << "demo: " << client.status() << "\n";
    return 1;
  }
  std::cout << "connected to " << url << " as client " << (*client)->id()
            << "\n\n";
  OrderService service(**client, workers);
  int rc = service.Run(requests, /*orders=*/3);
  // What the client counted, as a server would expose it on /metrics.
  std::cout << "\nthe client's metrics (relock::PrometheusText):\n"
            << relock::PrometheusText((*client)->Metrics());
  client->reset();
  return rc;
}
