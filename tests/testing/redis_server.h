// A real redis-server for tests and benchmarks: RedisServer starts a private
// server (its own free port on 127.0.0.1, optionally a unix socket and a TLS
// port, a fresh temp dir, no persistence) and can stop, restart, kill, pause
// and resume it to inject faults. SharedRedisServer() is the one server a test
// binary shares between its tests (flush it in SetUp: see tests/test_util.h).
//
// clang-format off
//   absl::StatusOr<std::unique_ptr<RedisServer>> redis = RedisServer::Start();
//   ASSERT_TRUE(redis.ok()) << redis.status();
//   client_options.url = (*redis)->url();  // "redis://127.0.0.1:<port>"
//   RedisValue v = *(*redis)->Command({"HGETALL", "lock"});  // inspect state
//   (*redis)->Pause();  ...  (*redis)->Resume();  // SIGSTOP / SIGCONT
// clang-format on
//
// The binary is $RELOCK_REDIS_SERVER, else /usr/bin/redis-server, else the
// first redis-server on $PATH. It runs with `--save "" --appendonly no` (a
// restart starts empty), `--bind 127.0.0.1`, `--protected-mode no`, and on
// Redis >= 7 `--enable-debug-command yes` (for DEBUG SLEEP and friends). The
// server's log is <dir()>/redis.log; errors from Start()/Restart() quote its
// tail. Port 6379 is never used.
//
// TLS (RedisServerOptions::tls; needs a redis-server built with TLS, such as
// Debian's): the server also listens on tls_port(), and the plaintext port()
// stays on (Command() speaks plain TCP). Start() makes the certificates in
// dir() with the openssl command-line tool (OpenSSL >= 3.0; $RELOCK_OPENSSL,
// else /usr/bin/openssl, else the first openssl on $PATH), EC P-256 keys
// valid for 3 days (four openssl runs, about 0.1 s):
//
//   ca.crt        ca_file(): the test CA, which signs the two below and is
//                 the server's --tls-ca-cert-file (it checks clients with it)
//   server.crt    the server's certificate, subjectAltName IP:127.0.0.1 and
//                 DNS:localhost (host-name verification of either passes)
//   client.crt    client_cert_file() + client_key_file(), for mutual TLS
//   other-ca.crt  other_ca_file(): an unrelated CA that signed nothing, for
//                 tests that must reject the server's certificate
//
// Their keys sit next to them (ca.key, server.key, ...), with openssl.cnf
// and openssl.log. Restart() keeps them all. If openssl is missing or fails,
// Start() fails (NotFound / Internal) and quotes its stderr. With
// RedisServerOptions::tls_files_from, Start() copies these eight files from
// another server's dir() instead (no openssl run), so that both servers'
// certificates come from one CA: a TLS cluster's nodes check each other's.
//
// A cluster node with TLS (`cluster` and `tls`) also runs its cluster bus
// and its replication link over TLS (--tls-cluster yes, --tls-replication
// yes; the bus port takes only TLS then) and shows client.crt when it
// connects out (--tls-client-cert-file: the bus always asks for a client
// certificate, and server.crt is for serverAuth only). Its TLS port is then
// the one it announces to the cluster: CLUSTER SLOTS, CLUSTER SHARDS'
// "tls-port" and MOVED/ASK name it to TLS clients, the plaintext port to
// plaintext clients, and MIGRATE connects to the target's TLS port.
//
// Server states and operations (Start() leaves it Running):
//
//               Stop()      Restart()   Kill()       Pause()     Resume()
//   Running     -> Stopped  -> Running  -> Stopped   -> Paused   no-op
//   Paused      -> Stopped  -> Running  -> Stopped   no-op       -> Running
//   Stopped     no-op       -> Running  FailedPrec.  FailedPrec. FailedPrec.
//
// Stop() is SIGTERM (plus SIGCONT if paused), then SIGKILL after 5 s. A
// server that died on its own (SHUTDOWN, DEBUG SEGFAULT) counts as Stopped.
// Restart() reuses the ports, the unix socket path and the dir (with the TLS
// certificates).
//
// Processes: the server dies with the test binary, however it ends (the
// destructor stops it, an at-exit handler stops the servers never destroyed,
// such as SharedRedisServer(); PR_SET_PDEATHSIG kills it if the binary is
// killed). A fork()ed copy of the test process never stops a server it
// inherited.
//
// Temp dirs (/tmp/relock-test-<pid>-XXXXXX): removed with the server (the
// destructor, or at exit); those of a process that could not remove them
// (killed, crashed, _exit()ed) are removed by ChildProcess once it reaps that
// child, or by the next process linked with the fixture (tests/testing/
// temp_dir.h).
//
// Thread-safety: all methods may be called from any thread. Command() and the
// accessors of fixed values run concurrently; the lifecycle methods
// (Stop/Restart/Kill/Pause/Resume) are serialized with each other.

#ifndef RELOCK_TESTS_TESTING_REDIS_SERVER_H_
#define RELOCK_TESTS_TESTING_REDIS_SERVER_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/common/mutex.h"
#include "tests/testing/raw_connection.h"

namespace relock {
namespace testing {

struct RedisServerOptions {
  // Also listen on <dir>/redis.sock (perm 700). The TCP port is always on.
  bool unix_socket = false;
  // If set, the server runs with --requirepass; Command() AUTHs with it and
  // url()/unix_url()/tls_url() carry it.
  std::string requirepass;
  // Also listen for TLS on tls_port(), with certificates made in dir() (see
  // the top of this file). The plaintext port() stays on.
  bool tls = false;
  // --tls-auth-clients, with `tls`: "no" (no client certificate asked for),
  // "yes" (one signed by ca_file() is required: client_cert_file()) or
  // "optional" (checked if sent). Anything else is InvalidArgument.
  std::string tls_auth_clients = "no";
  // With `tls`: a dir() of another RedisServer started with tls whose TLS
  // files this server copies into its own dir() instead of making new ones
  // (see the top of this file). Empty: make new ones.
  std::string tls_files_from;
  // Run as a Redis Cluster node (`--cluster-enabled yes`, its state in
  // <dir>/nodes.conf, which Restart() keeps) with its cluster bus on
  // cluster_port(), a free port of its own (not port + 10000, which may not
  // exist). With requirepass it also authenticates to its master
  // (--masterauth); with tls its bus and replication use TLS (see the top of
  // this file). RedisCluster (redis_cluster.h) joins such nodes into a
  // cluster.
  bool cluster = false;
  // --cluster-node-timeout, with `cluster`: how long a node may be
  // unreachable before the others fail it over.
  absl::Duration cluster_node_timeout = absl::Seconds(2);
  // Run as a Redis Sentinel (`redis-server <dir>/sentinel.conf --sentinel`)
  // whose config file starts with these lines (`sentinel monitor ...`,
  // `sentinel auth-pass ...`; the sentinel rewrites the file as it learns,
  // and Restart() keeps it). Empty: a data node. With requirepass, the
  // sentinel's own password. RedisSentinelGroup (redis_sentinel.h) starts
  // such sentinels.
  std::string sentinel_config;
  // Appended last (so they override the defaults), e.g.
  // {"--maxmemory", "10mb"}.
  std::vector<std::string> extra_args;
  // The address the server binds and every connection to it (Command(),
  // url()) uses; kHost by default. With `netns`, an address of that network
  // namespace that this process can reach (tools/harness/netns.h,
  // tests/testing/private_network.h). RedisCluster and RedisSentinelGroup
  // set it for their servers on a private network.
  std::string host = "127.0.0.1";
  // Run the server in this network namespace (`ip netns exec <netns>
  // redis-server ...`, which execs in place, so pid() is the server's):
  // needs CAP_SYS_ADMIN and an `ip` binary. Empty: this process's namespace.
  std::string netns;
};

class RedisServer {
 public:
  // Starts a server on a free port (and a second one for TLS; retrying with
  // new ports, up to 5 times, if another process grabs one first) and waits up
  // to 10 s until it answers. NotFound if there is no redis-server binary (or,
  // with tls, no openssl); Internal if openssl fails.
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start(
      RedisServerOptions options = {});

  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // Stops the server (see Stop()) and removes its dir.
  ~RedisServer();

  static constexpr const char* kHost = "127.0.0.1";

  // RedisServerOptions::host: kHost unless set.
  const std::string& host() const { return options_.host; }
  int port() const { return port_; }
  // The TLS port, or 0 without RedisServerOptions::tls.
  int tls_port() const { return tls_port_; }
  // The cluster bus port, or 0 without RedisServerOptions::cluster.
  int cluster_port() const { return cluster_port_; }
  // <dir>/redis.sock, or empty without RedisServerOptions::unix_socket.
  const std::string& socket_path() const { return socket_path_; }
  // The temp dir (holds redis.log and the socket).
  const std::string& dir() const { return dir_; }
  const std::string& log_path() const { return log_path_; }
  const std::string& requirepass() const { return options_.requirepass; }
  // The server's pid, or -1 when it is not running.
  pid_t pid() const;

  // "redis://127.0.0.1:<port>", or "redis://:<pass>@127.0.0.1:<port>" with
  // requirepass (the password percent-encoded); host() for 127.0.0.1.
  std::string url() const;
  // "unix://<socket_path>" (plus "?password=<pass>" with requirepass), or
  // empty without a socket.
  std::string unix_url() const;
  // "rediss://127.0.0.1:<tls_port>", or "rediss://:<pass>@127.0.0.1:<tls_port>"
  // with requirepass; empty without tls.
  std::string tls_url() const;

  // The TLS files in dir(), PEM; each empty without tls. Trust ca_file() to
  // accept the server's certificate; other_ca_file() must make a client
  // reject it. client_cert_file() / client_key_file() are signed by
  // ca_file(), as a server with tls_auth_clients "yes" requires.
  const std::string& ca_file() const { return ca_file_; }
  const std::string& other_ca_file() const { return other_ca_file_; }
  const std::string& client_cert_file() const { return client_cert_file_; }
  const std::string& client_key_file() const { return client_key_file_; }

  // See the state table above.
  absl::Status Stop();
  absl::Status Restart();  // Stop() if running, then start empty.
  absl::Status Kill();     // SIGKILL + reap.
  absl::Status Pause();    // SIGSTOP; returns once the process has stopped.
  absl::Status Resume();   // SIGCONT.
  // Running or Paused (reaps a server that died on its own).
  bool running() const;

  // Runs one command over a fresh TCP connection (1 s connect timeout, 5 s
  // command timeout; AUTH first with requirepass). A Redis error reply is a
  // RedisValue of kError, not an error Status; a failure to connect or talk
  // to the server is: Unavailable, or DeadlineExceeded on a timeout.
  absl::StatusOr<RedisValue> Command(const std::vector<std::string>& argv);

  // FLUSHALL; an error reply is an Internal Status.
  absl::Status FlushAll();

  // The last `max_bytes` of redis.log.
  std::string LogTail(size_t max_bytes = 4096) const;

 private:
  RedisServer(RedisServerOptions options, std::string binary, int major_version,
              std::string dir, int port, int tls_port, int cluster_port);

  // Makes the TLS files in dir_ with `openssl` (see the top of this file).
  absl::Status MakeTlsFiles(const std::string& openssl) const;
  // Copies them from options_.tls_files_from into dir_.
  absl::Status CopyTlsFiles() const;

  absl::Status StartProcessLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status StartSentinelLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The arguments every server and sentinel gets: port, loopback bind, dir,
  // no daemon, log file, no protected mode.
  void AppendCommonArgs(std::vector<std::string>* argv) const;
  // Starts `argv` with the log as stdout/stderr and waits until it answers.
  absl::Status SpawnLocked(const std::vector<std::string>& argv)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WaitUntilReadyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status StopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReapIfExitedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops the server and removes the dir (destructor; ShutdownAll()). A no-op
  // in a fork()ed copy of the process.
  void Shutdown();
  // Shuts down every server this process started and has not destroyed
  // (SharedRedisServer(), servers a test keeps in a leaked static). Runs at
  // exit.
  static void ShutdownAll();

  const RedisServerOptions options_;
  const std::string binary_;
  const int major_version_;  // Of binary_; 0 if unknown.
  const std::string dir_;
  const std::string log_path_;
  const std::string socket_path_;
  const int port_;
  const int tls_port_;      // 0 without tls.
  const int cluster_port_;  // 0 without cluster.
  // <dir_>/<name> with tls, else empty.
  const std::string ca_file_;
  const std::string ca_key_file_;
  const std::string other_ca_file_;
  const std::string other_ca_key_file_;
  const std::string server_cert_file_;
  const std::string server_key_file_;
  const std::string client_cert_file_;
  const std::string client_key_file_;
  const pid_t creator_pid_;  // getpid() of the process that started it.

  mutable Mutex mu_;
  mutable pid_t pid_ ABSL_GUARDED_BY(mu_) = -1;
  mutable bool paused_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

// The test binary's shared server: started on first use (thread-safe), with
// default options, stopped at exit. Aborts with a message on stderr if it
// cannot start. Tests that stop, kill or pause a server should start their own
// with RedisServer::Start() instead.
RedisServer& SharedRedisServer();

// One command on a fresh connection to 127.0.0.1:`port` (AUTH with
// `password` if not empty), for code that does not own the server, such as a
// child process. Same timeouts and errors as RedisServer::Command().
absl::StatusOr<RedisValue> CommandOnPort(int port,
                                         const std::vector<std::string>& argv,
                                         const std::string& password = "");

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_REDIS_SERVER_H_
