#include "lib/redis/pool.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace relock {
namespace redis {

PooledConnection::~PooledConnection() {
  if (conn_ != nullptr) pool_->Return(std::move(conn_));
}

ConnectionPool::ConnectionPool(ConnectionOptions options, int size)
    : options_(std::move(options)), size_(size) {}

ConnectionPool::~ConnectionPool() { Close(); }

absl::StatusOr<PooledConnection> ConnectionPool::Get(Deadline deadline) {
  uint64_t generation;
  {
    MutexLock lock(&mu_);
    auto can_proceed = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return closed_ || !idle_.empty() || open_ < size_;
    };
    const absl::Duration wait =
        std::min(options_.command_timeout, deadline.Remaining());
    if (!mu_.AwaitWithTimeout(absl::Condition(&can_proceed), wait)) {
      if (deadline.Expired()) {
        return absl::DeadlineExceededError(
            "deadline passed waiting for a free connection");
      }
      return absl::UnavailableError(
          absl::StrCat("all ", size_, " connections to Redis at ",
                       options_.endpoint.ToString(), " stayed busy for ",
                       absl::FormatDuration(options_.command_timeout),
                       "; raise ClientOptions::pool_size"));
    }
    if (closed_) return absl::FailedPreconditionError("the client is closed");
    if (!idle_.empty()) {
      std::unique_ptr<Connection> conn = std::move(idle_.back());
      idle_.pop_back();
      return PooledConnection(this, std::move(conn));
    }
    ++open_;  // reserve a slot; connect outside the mutex
    generation = generation_;
  }
  absl::StatusOr<std::unique_ptr<Connection>> conn =
      Connection::Open(options_, deadline);
  if (!conn.ok()) {
    MutexLock lock(&mu_);
    --open_;
    return conn.status();
  }
  (*conn)->set_generation(generation);
  return PooledConnection(this, *std::move(conn));
}

void ConnectionPool::Return(std::unique_ptr<Connection> conn) {
  std::vector<std::unique_ptr<Connection>> doomed;  // freed after the mutex
  MutexLock lock(&mu_);
  if (conn->dropped() && conn->generation() == generation_) {
    ++generation_;  // its siblings are suspect: retire them all
    open_ -= static_cast<int>(idle_.size());
    doomed.swap(idle_);
  }
  if (closed_ || conn->broken() || conn->generation() < generation_) {
    --open_;
    doomed.push_back(std::move(conn));
    return;
  }
  idle_.push_back(std::move(conn));
}

void ConnectionPool::Close() {
  std::vector<std::unique_ptr<Connection>> doomed;
  MutexLock lock(&mu_);
  closed_ = true;
  open_ -= static_cast<int>(idle_.size());
  doomed.swap(idle_);
}

}  // namespace redis
}  // namespace relock
