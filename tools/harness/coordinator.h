// The safety harness's coordinator (internal to tools/harness): starts the
// servers and the workers, injects the faults on a schedule, stops the
// workers and hands their records to the checker. RunHarness() (harness.h)
// is its public face.
//
//   coordinator.cc  the run: servers, workers, the schedule, the check
//   faults.cc       the fault injections
//
// Part of tools/harness (see harness.h).

#ifndef RELOCK_TOOLS_HARNESS_COORDINATOR_H_
#define RELOCK_TOOLS_HARNESS_COORDINATOR_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "tests/testing/child_process.h"
#include "tests/testing/private_network.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/redis_sentinel.h"
#include "tests/testing/redis_server.h"
#include "tools/harness/checker.h"
#include "tools/harness/harness.h"
#include "tools/harness/netns.h"

namespace relock {
namespace harness {
namespace internal_harness {

using ::relock::testing::ChildProcess;
using ::relock::testing::PrivateNetwork;
using ::relock::testing::RedisCluster;
using ::relock::testing::RedisClusterOptions;
using ::relock::testing::RedisSentinelGroup;
using ::relock::testing::RedisSentinelOptions;
using ::relock::testing::RedisServer;
using ::relock::testing::RedisServerOptions;
using ::relock::testing::RedisValue;

struct WorkerProc {
  int index = 0;
  std::unique_ptr<ChildProcess> child;
  std::string client_id;
  std::string log_path;
  bool killed = false;
};

// Waits until /proc/<pid>/stat shows the process stopped (T) or gone;
// whether it is stopped.
bool WaitStopped(pid_t pid, absl::Duration timeout);

class Coordinator {
 public:
  explicit Coordinator(HarnessOptions o);

  // Starts the servers and the workers, injects the faults, stops the
  // workers and checks their records.
  absl::StatusOr<Report> Run();

 private:
  static constexpr char kPrefix[] = "harness:";

  void Progress(const std::string& line);

  absl::Status MakeWorkDir();

  // The redis-server(s) (the locks' and the counters', apart in a netns run)
  // and, in cluster mode, the cluster.
  absl::Status StartServers();

  // What the checker reads: the options, the faults, the final counters and
  // the workers' logs.
  CheckInput MakeCheckInput(int64_t run_end,
                            std::vector<std::string> worker_failures);

  absl::Status SpawnWorker();

  int64_t Deadline(absl::Duration d) const;
  static void SleepUntil(int64_t t);

  // Long enough to span a long pause or a restart plus the lease, so that
  // the holder must be told its lock was lost before it releases.
  absl::Duration LongHold() const;

  // Asks every live worker to make one hold that begins in the next 300 ms
  // a long one, and waits that long.
  // In cluster mode, only of one of `locks` (the faulted master's), so that
  // the long hold does not stall a lock the fault does not excuse.
  void RequestLongHolds(const std::vector<int>& locks);

  absl::Duration FaultLength(FaultKind kind) const;

  // The servers that hold locks: the redis-server, the cluster's running
  // nodes, or the Redlock masters.
  std::vector<RedisServer*> DataNodes() const;

  // The servers a client kill or a SCRIPT FLUSH hits: DataNodes(), or in a
  // Redlock run one master at random (named in f->detail).
  std::vector<RedisServer*> FaultNodes(Fault* f);

  // Redlock runs: a master at random, named in f->detail; f->locks stays
  // empty (every lock lives on every master).
  RedisServer* RandomMaster(Fault* f);

  // The server that holds lock k now; null if the cluster cannot say, and in
  // a Redlock run (every master holds it: see DataNodes()).
  RedisServer* LockNode(int k) const;

  // A fault's target: the redis-server, or the master of a random lock, with
  // the locks it holds in f->locks and its index in *index. Null (and why in
  // f->detail) if the cluster cannot say.
  RedisServer* Target(Fault* f, size_t* index = nullptr);

  // Kills master i, waits for its replica's promotion, starts it again and
  // waits until it has rejoined as a replica. The node is started again even
  // if no replica took over (the fault then says so), so that the cluster
  // heals for the rest of the run.
  void Failover(size_t i, Fault* f);

  // Migrates the slot of a random lock to another master.
  void Reshard(Fault* f);

  // Sentinel mode: SENTINEL FAILOVER, until the old primary is a replica of
  // the new one.
  void SentinelFailover(Fault* f);

  // Sentinel or cluster mode on a private network: cuts data node `old`
  // (the primary, or the master of a random lock, whose locks Target() put
  // in f->locks) and about half of the live workers (one holding one of its
  // locks among them if one is found) off from the rest of the network until
  // its replica is promoted, and two leases more; heals, and waits until
  // the group (cluster) is healthy again, the old primary (master) back as
  // a replica. The fault's window is the whole of it, and it concerns every
  // lock (f->locks is cleared): the cut-off workers are cut off from every
  // other master too.
  void SplitBrain(size_t old, Fault* f);

  // Cluster mode: waits until every running node but master `old` says
  // that old's replica serves the slot of locks[0] (one of old's locks);
  // the replica.
  absl::StatusOr<size_t> WaitForClusterPromotion(size_t old,
                                                 const std::vector<int>& locks,
                                                 absl::Duration timeout);

  // Sentinel mode: asks the sentinels which data node is the primary now
  // (primary_), keeping the last answer if they cannot say.
  void RefreshPrimary();

  void RunSchedule();

  Fault Inject(FaultKind kind);

  void KillPoolConnections(Fault* f);

  void KillPoolConnectionsOn(RedisServer& node, Fault* f, int* killed,
                             int* spared);

  // The worker whose client id owns field `owner` ("<client-id>:<n>").
  WorkerProc* OwnerWorker(const std::string& owner);

  // The owner fields of lock k's holders in Redis: the lock hash's fields
  // (in a Redlock run, on any master);
  // in a semaphore run, those of the threads whose open hold (in their
  // worker's log, release not begun) has a permit out in Redis.
  std::vector<std::string> Owners(int k);

  // Semaphore runs: the permit ids out of semaphore k in Redis (its
  // "{name}:timeout" set), as the API spells them (hex), by their lease
  // ends on the server's clock (epoch ms); nullopt if it cannot say.
  absl::optional<std::map<std::string, int64_t>> PermitsOut(int k);

  // Semaphore runs: semaphore k's permits now (checker.h).
  PermitTally Tally(int k);

  // Partitions: how long (ms) the lease of lock k, or of permit `permit` of
  // semaphore k, has left on the lock Redis; -1 if it cannot say.
  int64_t LockPttlMs(int k);
  int64_t PermitLeaseLeftMs(int k, const std::string& permit);

  // Semaphore runs' StopAHolder: SIGSTOPs live workers, in random order,
  // until one shows an open hold in its log (release not begun) whose
  // permit is out in Redis; the stopped worker (its semaphore in *lock), or
  // null after 5 s (and why in f->detail). It stops first and looks after:
  // a permit names no worker, and the logs are read too slowly to find a
  // 1-5 ms hold still open by the time the worker is stopped.
  WorkerProc* StopAPermitHolder(Fault* f, int* lock);

  // Finds a worker whose owner field is in a lock and SIGSTOPs it, then
  // makes sure it still holds the lock, in Redis and by its own record (an
  // open hold); else lets it go on and looks again, for up to 5 s. The
  // stopped worker (and the lock in *lock), or null (and why in f->detail).
  WorkerProc* StopAHolder(Fault* f, int* lock);

  // Fenced runs (pause-holder): asks a random live worker to stop itself
  // between a critical section's SafeUntil() check and its fenced write
  // ("pause-before-write", worker.h) and waits until it has. The stopped
  // worker (and the lock it was about to write in *lock), or null (and why
  // in f->detail; the worker is sent SIGCONT in case it stopped after all).
  WorkerProc* StopAWriter(Fault* f, int* lock);

  void KillHolder(Fault* f);

  // A holder's process stopped past its lease (a GC pause, a VM steal),
  // then resumed: it may write after another owner took the lock. In fenced
  // runs every other one (the first included) stops the holder between its
  // SafeUntil() check and its write (StopAWriter), so that its write is
  // stale when it resumes and the resource must refuse it; the others, and
  // all in other runs, stop a holder wherever it is (StopAHolder).
  void PauseHolder(Fault* f);

  // Cuts a worker off from the lock Redis (netns.h) while it holds a lock
  // if it can (it is asked for a long hold first), for FaultLength(); the
  // lease each of its locks has left on the server is read right after the
  // cut, through the harness's own link.
  void PartitionWorker(Fault* f);

  // Tells every live worker to stop and collects them; returns problems.
  std::vector<std::string> StopWorkers();

  // The faults to inject (each at least once) and the faults dropped and
  // why: from HarnessOptions::faults and netns; makes lab_ if they need it.
  absl::Status ChooseFaults();

  // A private network (NetworkLab or PrivateNetwork) that was `made` into
  // *network; if it could not be, the error when it is `required`, else a
  // note (`not_run` and why) and OK.
  template <typename Network>
  absl::Status TakeNetwork(absl::StatusOr<std::unique_ptr<Network>> made,
                           bool required, absl::string_view not_run,
                           std::unique_ptr<Network>* network);

  static std::string FaultNames(const std::vector<FaultKind>& kinds);

  // The single server's locks: the lock redis-server in a netns run, else
  // the only one.
  RedisServer* LockServer() const;

  HarnessOptions o_;
  std::mt19937_64 rng_;
  // First, so that they go last: their namespaces after the processes in
  // them. net_: sentinel mode's private network (the split-brain fault).
  std::unique_ptr<NetworkLab> lab_;
  std::unique_ptr<PrivateNetwork> net_;
  std::vector<FaultKind> kinds_;
  std::vector<std::string> notes_;
  int partitions_ = 0;     // both-ways partitions so far
  int holder_pauses_ = 0;  // pause-holder faults so far
  std::string dir_;
  // The redis-server: the locks' and the counters' (single mode), or the
  // counters' only (cluster mode, where the locks are on cluster_).
  std::unique_ptr<RedisServer> redis_;
  std::unique_ptr<RedisCluster> cluster_;
  // Netns runs: the locks' redis-server (redis_ holds the counters only).
  std::unique_ptr<RedisServer> lock_redis_;
  // Redlock runs: the N independent masters (redis_ holds the counters).
  std::vector<std::unique_ptr<RedisServer>> masters_;
  // Sentinel mode: the locks' group (redis_ holds the counters), and the
  // data node that is its primary as last seen.
  std::unique_ptr<RedisSentinelGroup> sentinel_;
  size_t primary_ = 0;
  std::vector<WorkerProc> workers_;
  std::vector<Fault> faults_;
  int64_t run_start_ = 0;
  int64_t hard_end_ = 0;
};

}  // namespace internal_harness
}  // namespace harness
}  // namespace relock

#endif  // RELOCK_TOOLS_HARNESS_COORDINATOR_H_
