#include "tests/testing/fake_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace relock {
namespace testing {

absl::StatusOr<std::unique_ptr<FakeServer>> FakeServer::Start(
    FakeServerOptions options) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why =
        std::error_code(errno, std::system_category()).message();
    ::close(fd);
    return absl::InternalError(absl::StrCat("fake server: ", why));
  }
  return std::unique_ptr<FakeServer>(
      new FakeServer(std::move(options), fd, ntohs(addr.sin_port)));
}

FakeServer::FakeServer(FakeServerOptions options, int listen_fd, int port)
    : options_(std::move(options)), listen_fd_(listen_fd), port_(port) {
  thread_ = std::thread([this] { Run(); });
}

FakeServer::~FakeServer() {
  stop_.store(true);
  thread_.join();
  for (const int fd : open_fds_) ::close(fd);
  ::close(listen_fd_);
}

std::string FakeServer::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

void FakeServer::Run() {
  // One connection at a time: wait (a little) for the client to speak,
  // answer, then close it or keep it.
  while (!stop_.load()) {
    pollfd listening{listen_fd_, POLLIN, 0};
    if (::poll(&listening, 1, 20) <= 0) continue;
    const int conn = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    accepted_.fetch_add(1);
    pollfd readable{conn, POLLIN, 0};
    for (int waited = 0; waited < 100 && !stop_.load(); ++waited) {
      if (::poll(&readable, 1, 20) > 0) break;
    }
    char buf[4096];
    (void)::recv(conn, buf, sizeof(buf), MSG_DONTWAIT);
    (void)::send(conn, options_.answer.data(), options_.answer.size(),
                 MSG_NOSIGNAL);
    if (options_.close_after_answer) {
      ::close(conn);
    } else {
      open_fds_.push_back(conn);
    }
  }
}

}  // namespace testing
}  // namespace relock
