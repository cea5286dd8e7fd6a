// A TCP server on 127.0.0.1 that is not Redis, for tests of what a client
// does with an address where something else answers: each connection gets
// `answer` once the client has sent something (an HTTP server's "400 Bad
// Request", a plaintext Redis's reply to a TLS ClientHello...), and is then
// closed or kept open until the server stops. Destroying it stops its
// thread and closes every socket.

#ifndef RELOCK_TESTS_TESTING_FAKE_SERVER_H_
#define RELOCK_TESTS_TESTING_FAKE_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace relock {
namespace testing {

struct FakeServerOptions {
  std::string answer = "HTTP/1.1 400 Bad Request\r\n\r\n";
  // Close each connection after answering; else keep it open.
  bool close_after_answer = true;
};

class FakeServer {
 public:
  static absl::StatusOr<std::unique_ptr<FakeServer>> Start(
      FakeServerOptions options = {});
  ~FakeServer();
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;

  int port() const { return port_; }
  // "127.0.0.1:<port>".
  std::string address() const;
  // Connections accepted so far (any thread).
  int accepted() const { return accepted_.load(); }

 private:
  FakeServer(FakeServerOptions options, int listen_fd, int port);
  void Run();

  const FakeServerOptions options_;
  const int listen_fd_;
  const int port_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::vector<int> open_fds_;  // Run()'s thread only
  std::thread thread_;
};

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_FAKE_SERVER_H_
