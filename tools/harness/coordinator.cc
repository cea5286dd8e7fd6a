// The safety harness's coordinator (coordinator.h): the run, its servers and
// workers, the fault schedule and the check.

#include "tools/harness/coordinator.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "tools/harness/record.h"
#include "tools/harness/worker.h"

namespace relock {
namespace harness {
namespace internal_harness {

Coordinator::Coordinator(HarnessOptions o) : o_(std::move(o)) {
  if (o_.seed == 0) o_.seed = std::random_device()() | 1;
  if (o_.short_pause <= absl::ZeroDuration()) o_.short_pause = o_.lease / 4;
  if (o_.long_pause <= absl::ZeroDuration()) o_.long_pause = o_.lease * 2;
  if (o_.cluster_node_timeout <= absl::ZeroDuration()) {
    o_.cluster_node_timeout = o_.long_pause + absl::Seconds(2);
  }
  if (o_.sentinel_down_after <= absl::ZeroDuration()) {
    o_.sentinel_down_after = o_.long_pause + absl::Seconds(2);
  }
  if (o_.holder_pause <= absl::ZeroDuration()) o_.holder_pause = 2 * o_.lease;
  rng_.seed(o_.seed);
}

absl::StatusOr<Report> Coordinator::Run() {
  if (absl::Status v = ValidateHarnessOptions(o_); !v.ok()) return v;
  if (absl::Status k = ChooseFaults(); !k.ok()) return k;
  absl::Status s = MakeWorkDir();
  if (!s.ok()) return s;
  if (absl::Status servers = StartServers(); !servers.ok()) return servers;
  Progress(absl::StrCat(
      o_.cluster    ? absl::StrCat("cluster ", cluster_->url(),
                                net_ != nullptr ? " (private network)" : "",
                                   ", counters on ", redis_->url())
      : o_.sentinel ? absl::StrCat("sentinel group ", sentinel_->url(),
                                   net_ != nullptr ? " (private network)" : "",
                                   ", counters on ", redis_->url())
      : o_.redlock > 0
          ? absl::StrCat(o_.redlock, " Redlock masters on ports ",
                         absl::StrJoin(DataNodes(), ",",
                                       [](std::string* out, RedisServer* m) {
                                         absl::StrAppend(out, m->port());
                                       }),
                         ", counters on ", redis_->url())
      : lock_redis_ != nullptr
          ? absl::StrCat("redis-server on ", lock_redis_->url(), " (netns ",
                         lab_->lock_ns(), "), counters on ", redis_->url(),
                         " (netns ", lab_->counter_ns(), ")")
          : absl::StrCat("redis-server on ", redis_->url()),
      ", seed ", o_.seed, ", faults ", FaultNames(kinds_), ", logs in ", dir_));

  run_start_ = MonotonicNanos();
  // Workers stop by themselves at this time even if never told to.
  hard_end_ = run_start_ +
              absl::ToInt64Nanoseconds(o_.duration * 3 + absl::Seconds(120));
  for (int i = 0; i < o_.processes; ++i) {
    if (absl::Status w = SpawnWorker(); !w.ok()) return w;
  }
  RunSchedule();
  const int64_t run_end = MonotonicNanos();
  std::vector<std::string> worker_failures = StopWorkers();

  CheckInput in = MakeCheckInput(run_end, std::move(worker_failures));
  redis_.reset();  // stops the servers
  cluster_.reset();
  lock_redis_.reset();
  masters_.clear();
  sentinel_.reset();
  lab_.reset();  // the namespaces, their links and tables
  net_.reset();
  Report report = Check(std::move(in));
  if (report.ok() && o_.work_dir.empty()) {
    for (const WorkerProc& w : workers_) unlink(w.log_path.c_str());
    rmdir(dir_.c_str());
  } else {
    report.text += absl::StrCat("logs:       ", dir_, "\n");
  }
  return report;
}

absl::Status Coordinator::StartServers() {
  if (lab_ != nullptr) {
    // The counters on a server of their own, whose links are never cut.
    RedisServerOptions locks, counters;
    locks.host = lab_->lock_host();
    locks.netns = lab_->lock_ns();
    counters.host = lab_->counter_host();
    counters.netns = lab_->counter_ns();
    absl::StatusOr<std::unique_ptr<RedisServer>> l = RedisServer::Start(locks);
    if (!l.ok()) return l.status();
    lock_redis_ = *std::move(l);
    absl::StatusOr<std::unique_ptr<RedisServer>> c =
        RedisServer::Start(counters);
    if (!c.ok()) return c.status();
    redis_ = *std::move(c);
  } else {
    // On a private network the counters' server listens on the harness's
    // address there, which every host reaches and no split cuts.
    RedisServerOptions counters;
    if (net_ != nullptr) counters.host = net_->control_address();
    absl::StatusOr<std::unique_ptr<RedisServer>> redis =
        RedisServer::Start(counters);
    if (!redis.ok()) return redis.status();
    redis_ = *std::move(redis);
  }
  for (int i = 0; i < o_.redlock; ++i) {
    // Independent: no replication, no persistence (as the single server).
    absl::StatusOr<std::unique_ptr<RedisServer>> m = RedisServer::Start();
    if (!m.ok()) return m.status();
    masters_.push_back(*std::move(m));
  }
  if (o_.sentinel) {
    RedisSentinelOptions group;
    group.replicas = kSentinelReplicas;
    group.sentinels = 3;
    group.down_after = o_.sentinel_down_after;
    group.network = net_.get();
    absl::StatusOr<std::unique_ptr<RedisSentinelGroup>> started =
        RedisSentinelGroup::Start(group);
    if (!started.ok()) return started.status();
    sentinel_ = *std::move(started);
    RefreshPrimary();
  }
  if (o_.cluster) {
    RedisClusterOptions cluster_options;
    cluster_options.masters = o_.cluster_masters;
    cluster_options.replicas_per_master = kClusterReplicasPerMaster;
    cluster_options.node_timeout = o_.cluster_node_timeout;
    cluster_options.network = net_.get();
    absl::StatusOr<std::unique_ptr<RedisCluster>> cluster =
        RedisCluster::Start(cluster_options);
    if (!cluster.ok()) return cluster.status();
    cluster_ = *std::move(cluster);
    for (size_t i = 0; net_ != nullptr && i < cluster_->size(); ++i) {
      // A replica whose data is older than about node timeout x 10 (the
      // validity factor) + 10 s does not stand for election; after a split
      // brain on a loaded machine every replica must.
      absl::StatusOr<RedisValue> v = cluster_->node(i).Command(
          {"CONFIG", "SET", "cluster-replica-validity-factor", "0"});
      if (!v.ok()) return v.status();
    }
  }
  return absl::OkStatus();
}

CheckInput Coordinator::MakeCheckInput(
    int64_t run_end, std::vector<std::string> worker_failures) {
  CheckInput in;
  in.processes = o_.processes;
  in.threads = o_.threads;
  in.locks = o_.locks;
  in.lease_ns = absl::ToInt64Nanoseconds(o_.lease);
  in.run_start = run_start_;
  in.run_end = run_end;
  in.seed = o_.seed;
  in.replica_sync = o_.replica_sync;
  in.faults = faults_;
  in.worker_failures = std::move(worker_failures);
  in.max_wait_outside_faults_ns =
      absl::ToInt64Nanoseconds(o_.max_wait_outside_faults);
  in.max_kill_reacquire_extra_ns =
      absl::ToInt64Nanoseconds(KillReacquireBound(o_) - o_.lease);
  in.tolerate_ghost_holds = o_.tolerate_ghost_holds;
  in.loss_report_slack_ns = absl::ToInt64Nanoseconds(o_.loss_report_slack);
  in.fault_kinds = kinds_;
  in.notes = notes_;
  // In cluster, sentinel and netns runs the counters live on a server of
  // their own.
  in.restart_resets_counters =
      !o_.cluster && !o_.sentinel && lock_redis_ == nullptr && o_.redlock == 0;
  in.redlock_masters = o_.redlock;
  in.expect_split_brain_overlaps = o_.expect_split_brain_overlaps;
  in.fenced = o_.fenced;
  in.permits = o_.semaphore;
  if (o_.semaphore > 0) {
    // The permits of killed workers and of acquires whose reply was lost
    // were renewed last before the workers stopped: their leases end within
    // one lease.
    absl::SleepFor(o_.lease + absl::Milliseconds(200));
    for (int k = 0; k < o_.locks; ++k) in.permit_tallies.push_back(Tally(k));
  }
  for (int k = 0; k < o_.locks; ++k) {
    absl::StatusOr<RedisValue> v =
        redis_->Command({"GET", CounterName(kPrefix, k)});
    int64_t value = -1;
    if (v.ok() && v->is_nil()) value = 0;
    if (v.ok() && v->is_string() && !absl::SimpleAtoi(v->str, &value)) {
      value = -1;
    }
    in.counters.push_back(value);
  }
  for (const WorkerProc& w : workers_) {
    in.logs.push_back(ParseWorkerLog(w.index, w.log_path));
  }
  return in;
}

void Coordinator::Progress(const std::string& line) {
  if (o_.progress == nullptr) return;
  *o_.progress << absl::StrFormat(
                      "[harness +%6.2fs] ",
                      run_start_ == 0
                          ? 0.0
                          : static_cast<double>(MonotonicNanos() - run_start_) /
                                1e9)
               << line << std::endl;
}

absl::Status Coordinator::MakeWorkDir() {
  if (!o_.work_dir.empty()) {
    // Made (with its parents) if missing, so that the workers can open their
    // logs in it.
    std::error_code error;
    std::filesystem::create_directories(o_.work_dir, error);
    if (error || !std::filesystem::is_directory(o_.work_dir)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "work_dir \"", o_.work_dir, "\" is not a directory that can be made",
          error ? absl::StrCat(": ", error.message()) : std::string()));
    }
    dir_ = o_.work_dir;
    return absl::OkStatus();
  }
  const char* tmp = getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp",
                                   "/relock-harness-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("mkdtemp ", templ, ": ", strerror(errno)));
  }
  dir_ = templ;
  return absl::OkStatus();
}

absl::Status Coordinator::SpawnWorker() {
  WorkerConfig c;
  c.worker = static_cast<int>(workers_.size());
  c.url = o_.cluster       ? cluster_->url()
          : o_.sentinel    ? sentinel_->url()
          : o_.redlock > 0 ? masters_[0]->url()
                           : LockServer()->url();
  for (const std::unique_ptr<RedisServer>& m : masters_) {
    if (!c.redlock_masters.empty()) c.redlock_masters += ",";
    absl::StrAppend(&c.redlock_masters, m->host(), ":", m->port());
  }
  if (o_.sentinel) {
    std::vector<std::string> sentinels;
    for (size_t i = 0; i < sentinel_->sentinels(); ++i) {
      sentinels.push_back(absl::StrCat(sentinel_->sentinel(i).host(), ":",
                                       sentinel_->sentinel(i).port()));
    }
    c.keys_sentinels = absl::StrJoin(sentinels, ",");
    c.keys_master = sentinel_->master_name();
  }
  c.host = redis_->host();
  c.port = redis_->port();
  for (RedisServer* node : DataNodes()) {
    c.keys_host = node->host();
    c.keys_port = node->port();
    break;
  }
  if (lab_ != nullptr) {
    absl::StatusOr<std::string> ns = lab_->AddWorker(c.worker);
    if (!ns.ok()) return ns.status();
    c.netns = *ns;
  }
  if (net_ != nullptr) {
    absl::StatusOr<PrivateNetwork::Host> host =
        net_->AddHost(absl::StrCat("w", c.worker));
    if (!host.ok()) return host.status();
    c.netns = host->netns;
  }
  c.threads = o_.threads;
  c.locks = o_.locks;
  c.fenced = o_.fenced;
  c.fair = o_.fair;
  c.rw = o_.rw;
  c.multi = o_.multi;
  c.permits = o_.semaphore;
  c.replica_sync = o_.replica_sync;
  c.replica_sync_timeout_ms = absl::ToInt64Milliseconds(o_.command_timeout / 2);
  c.prefix = kPrefix;
  c.lease_ms = absl::ToInt64Milliseconds(o_.lease);
  c.wait_ms = absl::ToInt64Milliseconds(o_.acquire_wait);
  c.connect_timeout_ms = absl::ToInt64Milliseconds(o_.connect_timeout);
  c.command_timeout_ms = absl::ToInt64Milliseconds(o_.command_timeout);
  c.raw_timeout_ms =
      absl::ToInt64Milliseconds(o_.long_pause + absl::Seconds(2));
  c.hold_min_us = absl::ToInt64Microseconds(o_.hold_min);
  c.hold_max_us = absl::ToInt64Microseconds(o_.hold_max);
  c.think_max_us = absl::ToInt64Microseconds(o_.think_max);
  c.long_hold_ms = absl::ToInt64Milliseconds(LongHold());
  c.hard_end_ns = hard_end_;
  c.seed = o_.seed;
  c.log_path = absl::StrCat(dir_, "/worker-", c.worker, ".log");
  WorkerProc w;
  w.index = c.worker;
  w.log_path = c.log_path;
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn(o_.worker_routine, c.ToArgs());
  if (!child.ok()) return child.status();
  w.child = *std::move(child);
  absl::StatusOr<std::string> line = w.child->ReadLine(absl::Seconds(30));
  if (!line.ok() || !absl::StartsWith(*line, "ready ")) {
    return absl::InternalError(absl::StrCat(
        "worker ", w.index,
        " did not start: ", line.ok() ? *line : line.status().ToString()));
  }
  w.client_id = line->substr(6);
  Progress(
      absl::StrCat("worker ", w.index, " (pid ", w.child->pid(), ") ready"));
  workers_.push_back(std::move(w));
  return absl::OkStatus();
}

int64_t Coordinator::Deadline(absl::Duration d) const {
  return run_start_ + absl::ToInt64Nanoseconds(d);
}

void Coordinator::SleepUntil(int64_t t) {
  const int64_t now = MonotonicNanos();
  if (t > now) absl::SleepFor(absl::Nanoseconds(t - now));
}

absl::Duration Coordinator::LongHold() const {
  return o_.long_pause + o_.lease + absl::Seconds(1);
}

void Coordinator::RequestLongHolds(const std::vector<int>& locks) {
  const std::string line =
      locks.empty() ? std::string("long 300")
                    : absl::StrCat("long 300 ", absl::StrJoin(locks, ","));
  for (WorkerProc& w : workers_) {
    if (!w.killed) (void)w.child->WriteLine(line);
  }
  absl::SleepFor(absl::Milliseconds(300));
}

absl::Duration Coordinator::FaultLength(FaultKind kind) const {
  if (kind == FaultKind::kPauseShort) return o_.short_pause;
  if (kind == FaultKind::kPauseLong) return o_.long_pause;
  if (kind == FaultKind::kPauseHolder) return o_.holder_pause;
  // Both ways: shorter than the lease, then longer, by turns.
  if (kind == FaultKind::kPartition && partitions_ % 2 == 0) {
    return o_.lease / 2;
  }
  if (IsPartition(kind)) return 2 * o_.lease;
  if (kind == FaultKind::kFailover) {
    return o_.sentinel ? absl::Seconds(5)  // about
                       : o_.cluster_node_timeout + absl::Seconds(5);
  }
  if (kind == FaultKind::kSplitBrain) {  // about
    return (o_.sentinel ? o_.sentinel_down_after : o_.cluster_node_timeout) +
           2 * o_.lease + absl::Seconds(5);
  }
  return absl::ZeroDuration();
}

std::vector<RedisServer*> Coordinator::DataNodes() const {
  std::vector<RedisServer*> nodes;
  if (o_.sentinel) {
    for (size_t i = 0; i < sentinel_->data_nodes(); ++i) {
      if (sentinel_->node(i).running()) nodes.push_back(&sentinel_->node(i));
    }
    return nodes;
  }
  if (o_.redlock > 0) {
    for (const std::unique_ptr<RedisServer>& m : masters_) {
      if (m->running()) nodes.push_back(m.get());
    }
    return nodes;
  }
  if (!o_.cluster) {
    nodes.push_back(LockServer());
    return nodes;
  }
  for (size_t i = 0; i < cluster_->size(); ++i) {
    if (cluster_->node(i).running()) nodes.push_back(&cluster_->node(i));
  }
  return nodes;
}

RedisServer* Coordinator::LockNode(int k) const {
  if (o_.sentinel) return &sentinel_->node(primary_);
  if (o_.redlock > 0) return nullptr;
  if (!o_.cluster) return LockServer();
  absl::StatusOr<size_t> i = cluster_->NodeForKey(LockName(kPrefix, k));
  return i.ok() ? &cluster_->node(*i) : nullptr;
}

void Coordinator::RunSchedule() {
  // The first cycle in a fixed order (of the kinds chosen): cheap faults
  // first, the kill and the holder's pause before the Redis pauses (they
  // need a healthy Redis), the partitions (both ways twice: shorter, then
  // longer than the lease) between them, the restart last.
  std::vector<FaultKind> cycle;
  for (const FaultKind kind :
       {FaultKind::kClientKillNormal, FaultKind::kScriptFlush,
        FaultKind::kReshard, FaultKind::kKillHolder, FaultKind::kPauseHolder,
        FaultKind::kClientKillPubsub, FaultKind::kPartition,
        FaultKind::kPartitionRequests, FaultKind::kPartitionReplies,
        FaultKind::kPartition, FaultKind::kPauseShort, FaultKind::kPauseLong,
        FaultKind::kFailover, FaultKind::kSplitBrain, FaultKind::kRestart}) {
    if (std::find(kinds_.begin(), kinds_.end(), kind) != kinds_.end()) {
      cycle.push_back(kind);
    }
  }
  size_t next = 0;
  bool first_cycle = true;
  int64_t at = Deadline(o_.warmup);
  const int64_t end = Deadline(o_.duration);
  const int64_t tail = absl::ToInt64Nanoseconds(o_.tail);
  while (true) {
    if (next == cycle.size()) {
      first_cycle = false;
      next = 0;
      std::shuffle(cycle.begin(), cycle.end(), rng_);
    }
    const FaultKind kind = cycle[next];
    if (!first_cycle &&
        at + absl::ToInt64Nanoseconds(FaultLength(kind)) + tail > end) {
      break;
    }
    ++next;
    SleepUntil(at);
    Fault f = Inject(kind);
    Progress(absl::StrCat("fault ", FaultKindName(kind), ": ",
                          f.injected ? "" : "NOT INJECTED: ", f.detail));
    faults_.push_back(std::move(f));
    at = MonotonicNanos() + absl::ToInt64Nanoseconds(o_.fault_gap);
  }
  SleepUntil(std::max(end, at - absl::ToInt64Nanoseconds(o_.fault_gap) + tail));
}

std::vector<std::string> Coordinator::StopWorkers() {
  std::vector<std::string> problems;
  for (WorkerProc& w : workers_) {
    if (w.killed) continue;
    // Every fault resumes what it stopped; this one is for a worker that
    // stopped itself before a write too late for StopAWriter to see.
    (void)w.child->Signal(SIGCONT);
    (void)w.child->WriteLine("stop");
  }
  Progress("workers told to stop");
  const absl::Duration drain =
      o_.acquire_wait + o_.long_pause + o_.lease * 2 + absl::Seconds(20);
  for (WorkerProc& w : workers_) {
    if (w.killed) continue;
    absl::StatusOr<std::string> line = w.child->ReadLine(drain);
    // A late "pausing-before-write" line (see StopAWriter) is not an error.
    while (line.ok() && absl::StartsWith(*line, "pausing-before-write ")) {
      line = w.child->ReadLine(drain);
    }
    if (!line.ok() || *line != "done") {
      problems.push_back(
          absl::StrCat("worker ", w.index, " (pid ", w.child->pid(),
                       ") did not finish within ", absl::FormatDuration(drain),
                       ": ", line.ok() ? *line : line.status().ToString()));
      (void)w.child->Signal(SIGKILL);
    }
    absl::StatusOr<int> code = w.child->Wait(absl::Seconds(10));
    if (!code.ok() || *code != 0) {
      problems.push_back(absl::StrCat(
          "worker ", w.index, " exited with ",
          code.ok() ? absl::StrCat(*code) : code.status().ToString()));
    }
  }
  return problems;
}

absl::Status Coordinator::ChooseFaults() {
  const bool asked_net =
      std::any_of(o_.faults.begin(), o_.faults.end(),
                  [](FaultKind k) { return IsPartition(k); });
  const bool asked_split = std::find(o_.faults.begin(), o_.faults.end(),
                                     FaultKind::kSplitBrain) != o_.faults.end();
  const bool replicated = o_.cluster || o_.sentinel;
  if (o_.redlock > 0 && (asked_net || asked_split)) {
    return absl::InvalidArgumentError(
        "redlock runs have no partition or split-brain faults (their masters "
        "are independent and have no network namespaces)");
  }
  if (replicated && asked_net) {
    return absl::InvalidArgumentError(
        "the partition faults are single-server only for now (cluster and "
        "sentinel modes have split-brain)");
  }
  if (asked_split && !replicated) {
    return absl::InvalidArgumentError(
        "split-brain needs cluster mode (--cluster) or sentinel mode "
        "(--sentinel)");
  }
  if (asked_split && o_.netns == NetnsMode::kOff) {
    return absl::InvalidArgumentError(
        "split-brain needs network namespaces (netns off)");
  }
  if (replicated && o_.netns != NetnsMode::kOff &&
      (o_.netns == NetnsMode::kOn || asked_split || o_.faults.empty())) {
    if (absl::Status s = TakeNetwork(PrivateNetwork::Create(),
                                     asked_split || o_.netns == NetnsMode::kOn,
                                     "split-brain not run: ", &net_);
        !s.ok()) {
      return s;
    }
  }
  const bool want_lab =
      !o_.cluster && !o_.sentinel && o_.redlock == 0 &&
      o_.netns != NetnsMode::kOff &&
      (o_.netns == NetnsMode::kOn || asked_net || o_.faults.empty());
  if (asked_net && o_.netns == NetnsMode::kOff) {
    return absl::InvalidArgumentError(
        "the partition faults need network namespaces (netns off)");
  }
  if (want_lab) {
    if (absl::Status s = TakeNetwork(NetworkLab::Create(),
                                     asked_net || o_.netns == NetnsMode::kOn,
                                     "partition faults not run: ", &lab_);
        !s.ok()) {
      return s;
    }
  }
  const LockTopology topology = o_.cluster    ? LockTopology::kCluster
                                : o_.sentinel ? LockTopology::kSentinel
                                              : LockTopology::kSingle;
  const std::vector<FaultKind> supported =
      SupportedFaultKinds(topology, lab_ != nullptr || net_ != nullptr);
  if (o_.faults.empty()) {
    kinds_ = supported;
    return absl::OkStatus();
  }
  for (const FaultKind kind : o_.faults) {
    if (std::find(supported.begin(), supported.end(), kind) ==
        supported.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("fault ", FaultKindName(kind), " is not supported in ",
                       o_.cluster       ? "cluster"
                       : o_.sentinel    ? "sentinel"
                       : o_.redlock > 0 ? "redlock"
                                        : "single-server",
                       " mode"));
    }
  }
  kinds_ = o_.faults;
  return absl::OkStatus();
}

template <typename Network>
absl::Status Coordinator::TakeNetwork(
    absl::StatusOr<std::unique_ptr<Network>> made, bool required,
    absl::string_view not_run, std::unique_ptr<Network>* network) {
  if (made.ok()) {
    *network = *std::move(made);
  } else if (required) {
    return made.status();
  } else {
    notes_.push_back(absl::StrCat(not_run, made.status().message()));
    Progress(notes_.back());
  }
  return absl::OkStatus();
}

std::string Coordinator::FaultNames(const std::vector<FaultKind>& kinds) {
  std::vector<std::string> names;
  for (const FaultKind k : kinds) names.emplace_back(FaultKindName(k));
  return absl::StrJoin(names, ",");
}

RedisServer* Coordinator::LockServer() const {
  return lock_redis_ != nullptr ? lock_redis_.get() : redis_.get();
}

}  // namespace internal_harness
}  // namespace harness
}  // namespace relock
