// A thread-safe pool of Redis connections.
//
// Connections are opened on demand (outside the pool's mutex), up to `size`.
// A caller borrows one with Get() and returns it by destroying the
// PooledConnection; a broken connection is closed instead of returned, so the
// next borrower opens a fresh one. When all `size` connections are lent out,
// Get() waits up to command_timeout for one to come back.
//
// Generations: every connection remembers the pool's generation when it was
// opened. When one comes back dropped by the server (restart, CLIENT KILL,
// an idle `timeout`), its siblings of that generation are most likely dead
// too: the pool moves to the next generation and closes every idle
// connection of an older one, and older ones that are lent out are closed
// when they come back. A retry then gets a fresh connection, not another
// stale one.

#ifndef RELOCK_LIB_REDIS_POOL_H_
#define RELOCK_LIB_REDIS_POOL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "lib/common/mutex.h"
#include "lib/redis/connection.h"

namespace relock {
namespace redis {

class ConnectionPool;

class PooledConnection {
 public:
  PooledConnection(ConnectionPool* pool, std::unique_ptr<Connection> conn)
      : pool_(pool), conn_(std::move(conn)) {}
  PooledConnection(PooledConnection&&) = default;
  PooledConnection& operator=(PooledConnection&&) = delete;
  ~PooledConnection();

  Connection* operator->() const { return conn_.get(); }
  Connection& operator*() const { return *conn_; }

 private:
  ConnectionPool* pool_;
  std::unique_ptr<Connection> conn_;
};

class ConnectionPool {
 public:
  ConnectionPool(ConnectionOptions options, int size);
  ~ConnectionPool();

  // Borrows a connection: an idle one, a new one, or the next one returned,
  // within command_timeout (and `deadline`, if earlier). Unavailable if
  // connecting fails or none comes back in time; FailedPrecondition after
  // Close().
  absl::StatusOr<PooledConnection> Get(Deadline deadline = Deadline::Never());

  // Closes idle connections and makes later Get() calls fail. Borrowed
  // connections are closed when they come back.
  void Close();

  const ConnectionOptions& options() const { return options_; }

 private:
  friend class PooledConnection;
  void Return(std::unique_ptr<Connection> conn);

  const ConnectionOptions options_;
  const int size_;
  Mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 1;
  int open_ ABSL_GUARDED_BY(mu_) = 0;  // idle + lent + being opened
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace redis
}  // namespace relock

#endif  // RELOCK_LIB_REDIS_POOL_H_
