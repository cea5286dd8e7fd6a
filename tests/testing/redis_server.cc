#include "tests/testing/redis_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "lib/common/mutex.h"
#include "tests/testing/raw_connection.h"
#include "tests/testing/spawn.h"
#include "tests/testing/temp_dir.h"

namespace relock {
namespace testing {
namespace {

constexpr int kStartAttempts = 5;
constexpr int kRestartAttempts = 5;
constexpr absl::Duration kReadyTimeout = absl::Seconds(10);
constexpr absl::Duration kStopGracePeriod = absl::Seconds(5);
constexpr absl::Duration kConnectTimeout = absl::Seconds(1);
constexpr absl::Duration kCommandTimeout = absl::Seconds(5);
constexpr absl::Duration kOpensslTimeout = absl::Seconds(30);
constexpr char kSocketName[] = "redis.sock";
constexpr char kLogName[] = "redis.log";
// The TLS files in the server's dir (see redis_server.h).
constexpr char kOpensslConfigName[] = "openssl.cnf";
constexpr char kOpensslLogName[] = "openssl.log";
constexpr char kCaCertName[] = "ca.crt";
constexpr char kCaKeyName[] = "ca.key";
constexpr char kOtherCaCertName[] = "other-ca.crt";
constexpr char kOtherCaKeyName[] = "other-ca.key";
constexpr char kServerCertName[] = "server.crt";
constexpr char kServerKeyName[] = "server.key";
constexpr char kClientCertName[] = "client.crt";
constexpr char kClientKeyName[] = "client.key";
constexpr int kCertificateDays = 3;

// The openssl config for MakeTlsFiles(): `req` needs a distinguished_name
// section (the subjects come from -subj); one extension section per kind of
// certificate. Written to the dir so that the system's openssl.cnf (whose
// v3_ca would make every certificate a CA) plays no part.
constexpr char kOpensslConfig[] = R"(# Written by relock's RedisServer.
[req]
distinguished_name = dn
prompt = no
[dn]
[ca_ext]
basicConstraints = critical, CA:true
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical, CA:false
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client_ext]
basicConstraints = critical, CA:false
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
)";

// ---------------------------------------------------------------- helpers --

absl::Status ErrnoStatus(absl::StatusCode code, absl::string_view what,
                         int err) {
  return absl::Status(code, absl::StrCat(what, ": ", strerror(err)));
}

bool IsExecutable(const std::string& path) {
  struct stat st;
  return !path.empty() && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

// $<env_var> if set, else /usr/bin/<name>, else the first <name> on $PATH.
absl::StatusOr<std::string> FindTool(const char* env_var, const char* name,
                                     const char* package) {
  if (const char* env = getenv(env_var); env && *env) {
    if (IsExecutable(env)) return std::string(env);
    return absl::NotFoundError(
        absl::StrCat("$", env_var, "=", env, " is not an executable file"));
  }
  if (std::string usr_bin = absl::StrCat("/usr/bin/", name);
      IsExecutable(usr_bin)) {
    return usr_bin;
  }
  if (const char* path = getenv("PATH"); path) {
    for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
      std::string candidate = absl::StrCat(dir, "/", name);
      if (IsExecutable(candidate)) return candidate;
    }
  }
  return absl::NotFoundError(absl::StrCat(name, " not found: set $", env_var,
                                          ", or install it (apt-get install ",
                                          package, ")"));
}

// The major version of `binary` from `binary --version` ("... v=7.0.15 ..."),
// or 0 if it cannot be told.
int RedisMajorVersion(const std::string& binary) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return 0;
  internal::SpawnOptions spawn;
  spawn.path = binary;
  spawn.argv = {binary, "--version"};
  spawn.stdout_fd = pipe_fds[1];
  absl::StatusOr<pid_t> pid = internal::Spawn(spawn);
  close(pipe_fds[1]);
  std::string output;
  if (pid.ok()) {
    char buf[512];
    for (;;) {
      const ssize_t n = read(pipe_fds[0], buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      output.append(buf, static_cast<size_t>(n));
    }
    (void)internal::Reap(*pid);
  }
  close(pipe_fds[0]);
  const size_t v = output.find(" v=");
  int major = 0;
  if (v == std::string::npos) return 0;
  absl::string_view rest = absl::string_view(output).substr(v + 3);
  rest = rest.substr(0, rest.find('.'));
  return absl::SimpleAtoi(rest, &major) ? major : 0;
}

// `count` distinct ports that were free on 127.0.0.1 a moment ago (never
// 6379). All are bound at once, so the kernel cannot hand out one twice.
absl::StatusOr<std::vector<int>> PickFreePorts(size_t count) {
  std::vector<int> fds;
  std::vector<int> ports;
  absl::Status status = absl::OkStatus();
  for (int attempt = 0; ports.size() < count && attempt < 10; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      status = ErrnoStatus(absl::StatusCode::kUnavailable, "socket", errno);
      break;
    }
    fds.push_back(fd);
    sockaddr_in addr;
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      status = ErrnoStatus(absl::StatusCode::kUnavailable,
                           "binding a free port on 127.0.0.1", errno);
      break;
    }
    // 6379 stays bound until the end, so it does not come back either.
    const int port = ntohs(addr.sin_port);
    if (port != 6379 && port != 0) ports.push_back(port);
  }
  for (const int fd : fds) close(fd);
  if (!status.ok()) return status;
  if (ports.size() < count) {
    return absl::UnavailableError("no free port on 127.0.0.1");
  }
  return ports;
}

absl::Status WriteFile(const std::string& path, absl::string_view contents) {
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return ErrnoStatus(absl::StatusCode::kInternal,
                       absl::StrCat("creating ", path), errno);
  }
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return ErrnoStatus(absl::StatusCode::kInternal,
                         absl::StrCat("writing ", path), err);
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) {
    return ErrnoStatus(absl::StatusCode::kInternal,
                       absl::StrCat("writing ", path), errno);
  }
  return absl::OkStatus();
}

// The whole file; Internal naming it if it cannot be read.
absl::StatusOr<std::string> ReadFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return ErrnoStatus(absl::StatusCode::kInternal,
                       absl::StrCat("opening ", path), errno);
  }
  std::string contents;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return ErrnoStatus(absl::StatusCode::kInternal,
                         absl::StrCat("reading ", path), err);
    }
    if (n == 0) break;
    contents.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return contents;
}

std::string ReadTail(const std::string& path, size_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::StrCat("(cannot read ", path, ": ", strerror(errno), ")");
  struct stat st;
  std::string tail;
  if (fstat(fd, &st) == 0) {
    const off_t size = st.st_size;
    const off_t start = size > static_cast<off_t>(max_bytes)
                            ? size - static_cast<off_t>(max_bytes)
                            : 0;
    tail.resize(static_cast<size_t>(size - start));
    size_t done = 0;
    while (done < tail.size()) {
      const ssize_t n = pread(fd, &tail[done], tail.size() - done,
                              start + static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    tail.resize(done);
    if (start > 0) tail = absl::StrCat("...", tail);
  }
  close(fd);
  return tail;
}

// Runs `openssl <args>` (stdin and stdout /dev/null, stderr to
// <dir>/openssl.log, which each run truncates); an error quotes that stderr.
absl::Status RunOpenssl(const std::string& openssl, const std::string& dir,
                        const std::vector<std::string>& args) {
  std::vector<std::string> argv = {openssl};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string command = absl::StrJoin(argv, " ");
  const std::string log_path = absl::StrCat(dir, "/", kOpensslLogName);
  const int log_fd =
      open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log_fd < 0) {
    return ErrnoStatus(absl::StatusCode::kInternal,
                       absl::StrCat("opening ", log_path), errno);
  }
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  internal::SpawnOptions spawn;
  spawn.path = openssl;
  spawn.argv = argv;
  spawn.stdin_fd = null_fd;
  spawn.stdout_fd = null_fd;
  spawn.stderr_fd = log_fd;
  absl::StatusOr<pid_t> pid = internal::Spawn(spawn);
  close(log_fd);
  if (null_fd >= 0) close(null_fd);
  if (!pid.ok()) return pid.status();  // It names the command.
  absl::StatusOr<int> status = internal::ReapWithTimeout(*pid, kOpensslTimeout);
  const bool timed_out = absl::IsDeadlineExceeded(status.status());
  if (timed_out) {
    kill(*pid, SIGKILL);
    (void)internal::Reap(*pid);
  }
  auto stderr_text = [&] {
    std::string text = ReadTail(log_path, 2048);
    return text.empty() ? std::string("(empty)") : absl::StrCat("\n", text);
  };
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat("`", command, "` did not end within ",
                     absl::FormatDuration(kOpensslTimeout),
                     "; its stderr: ", stderr_text()));
  }
  if (!status.ok()) {
    return absl::Status(
        status.status().code(),
        absl::StrCat("`", command, "`: ", status.status().message()));
  }
  if (*status != 0) {
    return absl::InternalError(absl::StrCat(
        "`", command, "` failed (", internal::DescribeWaitStatus(*status),
        "); its stderr: ", stderr_text()));
  }
  return absl::OkStatus();
}

// A URL's ":<password>@" (percent-encoded), or empty without a password.
std::string UserInfo(const std::string& password) {
  if (password.empty()) return "";
  return absl::StrCat(":", PercentEncode(password), "@");
}

// One command on a fresh connection to `host`:`port`.
absl::StatusOr<RedisValue> RawCommand(const std::string& host, int port,
                                      const std::string& password,
                                      const std::vector<std::string>& argv,
                                      absl::Duration connect_timeout,
                                      absl::Duration command_timeout) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command");
  RawConnectionOptions options;
  options.connect_timeout = connect_timeout;
  options.command_timeout = command_timeout;
  options.password = password;
  absl::StatusOr<RawConnection> c = RawConnection::Connect(host, port, options);
  if (!c.ok()) return c.status();
  return c->Command(argv);
}

// Every RedisServer of this process that has not been destroyed, with the
// pid of the process that made it (a fork()ed copy has the same objects).
struct LiveServers {
  Mutex mu;
  std::vector<std::pair<RedisServer*, pid_t>> servers ABSL_GUARDED_BY(mu);
};

LiveServers& TheLiveServers() {
  static auto* const live = new LiveServers;  // never destroyed
  return *live;
}

// <dir>/<name> with TLS, else empty.
std::string TlsPath(const RedisServerOptions& options, const std::string& dir,
                    const char* name) {
  return options.tls ? absl::StrCat(dir, "/", name) : "";
}

}  // namespace

// ------------------------------------------------------------- RedisValue --

// ------------------------------------------------------------ RedisServer --

RedisServer::RedisServer(RedisServerOptions options, std::string binary,
                         int major_version, std::string dir, int port,
                         int tls_port, int cluster_port)
    : options_(std::move(options)),
      binary_(std::move(binary)),
      major_version_(major_version),
      dir_(std::move(dir)),
      log_path_(absl::StrCat(dir_, "/", kLogName)),
      socket_path_(options_.unix_socket ? absl::StrCat(dir_, "/", kSocketName)
                                        : ""),
      port_(port),
      tls_port_(options_.tls ? tls_port : 0),
      cluster_port_(options_.cluster ? cluster_port : 0),
      ca_file_(TlsPath(options_, dir_, kCaCertName)),
      ca_key_file_(TlsPath(options_, dir_, kCaKeyName)),
      other_ca_file_(TlsPath(options_, dir_, kOtherCaCertName)),
      other_ca_key_file_(TlsPath(options_, dir_, kOtherCaKeyName)),
      server_cert_file_(TlsPath(options_, dir_, kServerCertName)),
      server_key_file_(TlsPath(options_, dir_, kServerKeyName)),
      client_cert_file_(TlsPath(options_, dir_, kClientCertName)),
      client_key_file_(TlsPath(options_, dir_, kClientKeyName)),
      creator_pid_(getpid()) {
  // Stops the servers never destroyed (SharedRedisServer(), a test's leaked
  // static) at exit, and removes their dirs.
  static const bool at_exit = (std::atexit(&RedisServer::ShutdownAll), true);
  (void)at_exit;
  LiveServers& live = TheLiveServers();
  MutexLock lock(&live.mu);
  live.servers.emplace_back(this, creator_pid_);
}

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start(
    RedisServerOptions options) {
  absl::StatusOr<std::string> binary =
      FindTool("RELOCK_REDIS_SERVER", "redis-server", "redis-server");
  if (!binary.ok()) return binary.status();
  std::string openssl;
  if (options.tls) {
    const std::string& auth = options.tls_auth_clients;
    if (auth != "yes" && auth != "no" && auth != "optional") {
      return absl::InvalidArgumentError(
          absl::StrCat("RedisServer::Start: tls_auth_clients is \"", auth,
                       "\"; expected \"yes\", \"no\" or \"optional\""));
    }
    if (options.tls_files_from.empty()) {
      absl::StatusOr<std::string> found =
          FindTool("RELOCK_OPENSSL", "openssl", "openssl");
      if (!found.ok()) return found.status();
      openssl = *std::move(found);
    }
  }
  const int major_version = RedisMajorVersion(*binary);
  absl::Status last;
  for (int attempt = 1; attempt <= kStartAttempts; ++attempt) {
    // New ports (and a new dir) per attempt: the likely failure is that
    // another process took a port between PickFreePorts() and the server's
    // bind() (of either port: Redis exits if it cannot listen on both).
    // [0] the port, then the TLS port and the cluster bus port if asked for.
    absl::StatusOr<std::vector<int>> ports =
        PickFreePorts(1 + (options.tls ? 1 : 0) + (options.cluster ? 1 : 0));
    if (!ports.ok()) return ports.status();
    absl::StatusOr<std::string> dir =
        internal::MakeTempDir(options.unix_socket ? kSocketName : "");
    if (!dir.ok()) return dir.status();
    std::unique_ptr<RedisServer> server(
        new RedisServer(options, *binary, major_version, *dir, (*ports)[0],
                        options.tls ? (*ports)[1] : 0, ports->back()));
    if (options.tls) {
      // Not retried: a new port does not help openssl. ~RedisServer removes
      // the dir.
      absl::Status made = options.tls_files_from.empty()
                              ? server->MakeTlsFiles(openssl)
                              : server->CopyTlsFiles();
      if (!made.ok()) {
        return absl::Status(made.code(),
                            absl::StrCat("RedisServer::Start: making the TLS "
                                         "certificates: ",
                                         made.message()));
      }
    }
    {
      MutexLock lock(&server->mu_);
      last = server->StartProcessLocked();
    }
    if (last.ok()) return server;
    // ~RedisServer removes the dir.
  }
  return absl::Status(
      last.code(),
      absl::StrCat("RedisServer::Start: gave up after ", kStartAttempts,
                   " attempts; last: ", last.message()));
}

RedisServer::~RedisServer() {
  Shutdown();
  LiveServers& live = TheLiveServers();
  MutexLock lock(&live.mu);
  live.servers.erase(
      std::remove_if(live.servers.begin(), live.servers.end(),
                     [this](const auto& entry) { return entry.first == this; }),
      live.servers.end());
}

void RedisServer::ShutdownAll() {
  LiveServers& live = TheLiveServers();
  // Held throughout, so a server being destroyed on another thread stays
  // alive until this is done with it (its destructor waits for `mu`).
  MutexLock lock(&live.mu);
  for (const auto& [server, creator] : live.servers) {
    if (creator == getpid()) server->Shutdown();
  }
}

void RedisServer::Shutdown() {
  if (getpid() != creator_pid_) return;  // A fork()ed copy: not ours.
  {
    MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    (void)StopLocked();
  }
  internal::RemoveTree(dir_);
}

absl::Status RedisServer::MakeTlsFiles(const std::string& openssl) const {
  const std::string config = absl::StrCat(dir_, "/", kOpensslConfigName);
  absl::Status status = WriteFile(config, kOpensslConfig);
  if (!status.ok()) return status;
  struct Certificate {
    const std::string& cert;
    const std::string& key;
    const char* subject;
    const char* extensions;  // A section of kOpensslConfig.
    bool signed_by_ca;       // Else self-signed.
  };
  const Certificate certificates[] = {
      {ca_file_, ca_key_file_, "/CN=relock test CA", "ca_ext", false},
      {server_cert_file_, server_key_file_, "/CN=localhost", "server_ext",
       true},
      {client_cert_file_, client_key_file_, "/CN=relock test client",
       "client_ext", true},
      {other_ca_file_, other_ca_key_file_, "/CN=relock unrelated test CA",
       "ca_ext", false},
  };
  // One `openssl req -x509` each: a new EC P-256 key and its certificate,
  // signed with OpenSSL >= 3.0's -CA/-CAkey (no CSR, no x509 -req step).
  for (const Certificate& c : certificates) {
    std::vector<std::string> args = {"req",  "-x509",       "-config",
                                     config, "-extensions", c.extensions};
    args.insert(args.end(), {"-newkey", "ec", "-pkeyopt",
                             "ec_paramgen_curve:prime256v1", "-nodes"});
    args.insert(args.end(),
                {"-keyout", c.key, "-out", c.cert, "-subj", c.subject, "-days",
                 absl::StrCat(kCertificateDays)});
    if (c.signed_by_ca) {
      args.insert(args.end(), {"-CA", ca_file_, "-CAkey", ca_key_file_});
    }
    status = RunOpenssl(openssl, dir_, args);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status RedisServer::CopyTlsFiles() const {
  const std::pair<const char*, const std::string&> files[] = {
      {kCaCertName, ca_file_},
      {kCaKeyName, ca_key_file_},
      {kOtherCaCertName, other_ca_file_},
      {kOtherCaKeyName, other_ca_key_file_},
      {kServerCertName, server_cert_file_},
      {kServerKeyName, server_key_file_},
      {kClientCertName, client_cert_file_},
      {kClientKeyName, client_key_file_},
  };
  for (const auto& [name, to] : files) {
    const std::string from = absl::StrCat(options_.tls_files_from, "/", name);
    absl::StatusOr<std::string> contents = ReadFile(from);
    if (!contents.ok()) return contents.status();
    if (absl::Status s = WriteFile(to, *contents); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void RedisServer::AppendCommonArgs(std::vector<std::string>* argv) const {
  argv->insert(argv->end(), {"--port", absl::StrCat(port_), "--bind",
                             options_.host, "--dir", dir_, "--daemonize", "no",
                             "--logfile", log_path_, "--protected-mode", "no"});
}

absl::Status RedisServer::StartProcessLocked() {
  if (!options_.sentinel_config.empty()) return StartSentinelLocked();
  std::vector<std::string> argv = {binary_};
  AppendCommonArgs(&argv);
  argv.insert(argv.end(), {"--save", "", "--appendonly", "no"});
  if (major_version_ >= 7) {
    argv.insert(argv.end(), {"--enable-debug-command", "yes"});
  }
  if (!socket_path_.empty()) {
    argv.insert(argv.end(),
                {"--unixsocket", socket_path_, "--unixsocketperm", "700"});
  }
  if (!options_.requirepass.empty()) {
    argv.insert(argv.end(), {"--requirepass", options_.requirepass});
  }
  if (options_.tls) {
    argv.insert(argv.end(),
                {"--tls-port", absl::StrCat(tls_port_), "--tls-cert-file",
                 server_cert_file_, "--tls-key-file", server_key_file_,
                 "--tls-ca-cert-file", ca_file_, "--tls-auth-clients",
                 options_.tls_auth_clients});
  }
  if (options_.cluster) {
    argv.insert(
        argv.end(),
        {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
         "--cluster-port", absl::StrCat(cluster_port_),
         "--cluster-node-timeout",
         absl::StrCat(absl::ToInt64Milliseconds(options_.cluster_node_timeout)),
         // A replica's first sync starts at once, not after 5 s.
         "--repl-diskless-sync-delay", "0"});
    if (!options_.requirepass.empty()) {
      argv.insert(argv.end(), {"--masterauth", options_.requirepass});
    }
    if (options_.tls) {  // the bus and replication too (see the header)
      argv.insert(argv.end(),
                  {"--tls-cluster", "yes", "--tls-replication", "yes",
                   "--tls-client-cert-file", client_cert_file_,
                   "--tls-client-key-file", client_key_file_});
    }
  }
  argv.insert(argv.end(), options_.extra_args.begin(),
              options_.extra_args.end());
  return SpawnLocked(argv);
}

absl::Status RedisServer::StartSentinelLocked() {
  const std::string config = absl::StrCat(dir_, "/sentinel.conf");
  if (access(config.c_str(), F_OK) != 0) {  // a restart keeps what it learnt
    FILE* f = fopen(config.c_str(), "we");
    if (f == nullptr) {
      return ErrnoStatus(absl::StatusCode::kInternal,
                         absl::StrCat("creating ", config), errno);
    }
    const std::string text = absl::StrCat(options_.sentinel_config, "\n");
    const bool written = fwrite(text.data(), 1, text.size(), f) == text.size();
    if (fclose(f) != 0 || !written) {
      return absl::InternalError(absl::StrCat("writing ", config));
    }
  }
  std::vector<std::string> argv = {binary_, config, "--sentinel"};
  AppendCommonArgs(&argv);
  if (!options_.requirepass.empty()) {
    argv.insert(argv.end(), {"--requirepass", options_.requirepass});
  }
  argv.insert(argv.end(), options_.extra_args.begin(),
              options_.extra_args.end());
  return SpawnLocked(argv);
}

absl::Status RedisServer::SpawnLocked(const std::vector<std::string>& argv) {
  const int log_fd =
      open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0) {
    return ErrnoStatus(absl::StatusCode::kUnavailable,
                       absl::StrCat("opening ", log_path_), errno);
  }
  internal::SpawnOptions spawn;
  spawn.path = binary_;
  spawn.argv = argv;
  if (!options_.netns.empty()) {
    // `ip netns exec` enters the namespace and execs the server in place.
    absl::StatusOr<std::string> ip = FindTool("RELOCK_IP", "ip", "iproute2");
    if (!ip.ok() && IsExecutable("/usr/sbin/ip")) ip = "/usr/sbin/ip";
    if (!ip.ok()) {
      close(log_fd);
      return ip.status();
    }
    spawn.path = *ip;
    spawn.argv = {*ip, "netns", "exec", options_.netns};
    spawn.argv.insert(spawn.argv.end(), argv.begin(), argv.end());
  }
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  spawn.stdin_fd = null_fd;
  spawn.stdout_fd = log_fd;
  spawn.stderr_fd = log_fd;
  absl::StatusOr<pid_t> pid = internal::Spawn(spawn);
  close(log_fd);
  if (null_fd >= 0) close(null_fd);
  if (!pid.ok()) return pid.status();
  pid_ = *pid;
  paused_ = false;

  absl::Status ready = WaitUntilReadyLocked();
  if (!ready.ok() && pid_ > 0) {
    kill(pid_, SIGKILL);
    (void)internal::Reap(pid_);
    pid_ = -1;
  }
  return ready;
}

absl::Status RedisServer::WaitUntilReadyLocked() {
  const auto deadline = std::chrono::steady_clock::now() +
                        absl::ToChronoNanoseconds(kReadyTimeout);
  // Our server, not whoever else may listen on the port: match the pid.
  const std::string own_pid = absl::StrCat("process_id:", pid_, "\r\n");
  absl::Status last = absl::UnknownError("no answer yet");
  for (;;) {
    absl::StatusOr<int> status = internal::TryReap(pid_);
    if (!absl::IsUnavailable(status.status())) {
      pid_ = -1;
      return absl::UnavailableError(absl::StrCat(
          "redis-server (", binary_, ") for ", options_.host, ":", port_,
          tls_port_ != 0 ? absl::StrCat(" and TLS port ", tls_port_) : "",
          " ended (",
          status.ok() ? internal::DescribeWaitStatus(*status)
                      : status.status().ToString(),
          ") before answering; tail of ", log_path_, ":\n", LogTail(2048)));
    }
    absl::StatusOr<RedisValue> info = RawCommand(
        options_.host, port_, options_.requirepass, {"INFO", "server"},
        absl::Milliseconds(200), absl::Seconds(1));
    if (info.ok() && info->is_string() &&
        info->str.find(own_pid) != std::string::npos) {
      return absl::OkStatus();
    }
    if (!info.ok()) {
      last = info.status();
    } else {
      last = absl::UnavailableError(
          absl::StrCat("the port answers INFO without ", own_pid));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "redis-server (pid ", pid_, ") did not answer on ", kHost, ":", port_,
          " within ", absl::FormatDuration(kReadyTimeout), " (last: ",
          last.ToString(), "); tail of ", log_path_, ":\n", LogTail(2048)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

void RedisServer::ReapIfExitedLocked() const {
  if (pid_ <= 0) return;
  // Gone (reaped now), or not our child any more (someone else reaped it).
  if (!absl::IsUnavailable(internal::TryReap(pid_).status())) {
    pid_ = -1;
    paused_ = false;
  }
}

absl::Status RedisServer::StopLocked() {
  ReapIfExitedLocked();
  if (pid_ <= 0) return absl::OkStatus();
  kill(pid_, SIGTERM);
  kill(pid_, SIGCONT);  // A paused server must run to handle SIGTERM.
  absl::StatusOr<int> status =
      internal::ReapWithTimeout(pid_, kStopGracePeriod);
  if (absl::IsDeadlineExceeded(status.status())) {
    kill(pid_, SIGKILL);
    status = internal::Reap(pid_);
  }
  pid_ = -1;
  paused_ = false;
  return status.ok() ? absl::OkStatus() : status.status();
}

pid_t RedisServer::pid() const {
  MutexLock lock(&mu_);
  ReapIfExitedLocked();
  return pid_;
}

bool RedisServer::running() const {
  MutexLock lock(&mu_);
  ReapIfExitedLocked();
  return pid_ > 0;
}

std::string RedisServer::url() const {
  return absl::StrCat("redis://", UserInfo(options_.requirepass), options_.host,
                      ":", port_);
}

std::string RedisServer::tls_url() const {
  if (tls_port_ == 0) return "";
  return absl::StrCat("rediss://", UserInfo(options_.requirepass),
                      options_.host, ":", tls_port_);
}

std::string RedisServer::unix_url() const {
  if (socket_path_.empty()) return "";
  std::string url = absl::StrCat("unix://", socket_path_);
  if (!options_.requirepass.empty()) {
    absl::StrAppend(&url, "?password=", PercentEncode(options_.requirepass));
  }
  return url;
}

absl::Status RedisServer::Stop() {
  MutexLock lock(&mu_);
  return StopLocked();
}

absl::Status RedisServer::Restart() {
  MutexLock lock(&mu_);
  if (shut_down_) {
    return absl::FailedPreconditionError("RedisServer::Restart: shut down");
  }
  absl::Status status = StopLocked();
  if (!status.ok()) return status;
  for (int attempt = 1; attempt <= kRestartAttempts; ++attempt) {
    status = StartProcessLocked();
    if (status.ok()) return status;
    absl::SleepFor(absl::Milliseconds(200));
  }
  return absl::Status(status.code(),
                      absl::StrCat("RedisServer::Restart on port ", port_, ": ",
                                   status.message()));
}

absl::Status RedisServer::Kill() {
  MutexLock lock(&mu_);
  ReapIfExitedLocked();
  if (pid_ <= 0) {
    return absl::FailedPreconditionError("RedisServer::Kill: not running");
  }
  kill(pid_, SIGKILL);
  absl::StatusOr<int> status = internal::Reap(pid_);
  pid_ = -1;
  paused_ = false;
  return status.ok() ? absl::OkStatus() : status.status();
}

absl::Status RedisServer::Pause() {
  MutexLock lock(&mu_);
  ReapIfExitedLocked();
  if (pid_ <= 0) {
    return absl::FailedPreconditionError("RedisServer::Pause: not running");
  }
  if (paused_) return absl::OkStatus();
  if (kill(pid_, SIGSTOP) != 0) {
    return ErrnoStatus(absl::StatusCode::kInternal, "kill(SIGSTOP)", errno);
  }
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WUNTRACED);
    if (r < 0 && errno == EINTR) continue;
    if (r == pid_ && WIFSTOPPED(status)) {
      paused_ = true;
      return absl::OkStatus();
    }
    const std::string what =
        r == pid_ ? internal::DescribeWaitStatus(status) : strerror(errno);
    pid_ = -1;
    return absl::UnavailableError(
        absl::StrCat("RedisServer::Pause: the server ended: ", what));
  }
}

absl::Status RedisServer::Resume() {
  MutexLock lock(&mu_);
  ReapIfExitedLocked();
  if (pid_ <= 0) {
    return absl::FailedPreconditionError("RedisServer::Resume: not running");
  }
  if (!paused_) return absl::OkStatus();
  if (kill(pid_, SIGCONT) != 0) {
    return ErrnoStatus(absl::StatusCode::kInternal, "kill(SIGCONT)", errno);
  }
  paused_ = false;
  return absl::OkStatus();
}

absl::StatusOr<RedisValue> CommandOnPort(int port,
                                         const std::vector<std::string>& argv,
                                         const std::string& password) {
  return RawCommand(RedisServer::kHost, port, password, argv, kConnectTimeout,
                    kCommandTimeout);
}

absl::StatusOr<RedisValue> RedisServer::Command(
    const std::vector<std::string>& argv) {
  return RawCommand(options_.host, port_, options_.requirepass, argv,
                    kConnectTimeout, kCommandTimeout);
}

absl::Status RedisServer::FlushAll() {
  absl::StatusOr<RedisValue> reply = Command({"FLUSHALL"});
  if (!reply.ok()) return reply.status();
  if (reply->is_error()) {
    return absl::InternalError(absl::StrCat("FLUSHALL: ", reply->str));
  }
  return absl::OkStatus();
}

std::string RedisServer::LogTail(size_t max_bytes) const {
  return ReadTail(log_path_, max_bytes);
}

RedisServer& SharedRedisServer() {
  static RedisServer* const server = [] {
    absl::StatusOr<std::unique_ptr<RedisServer>> started = RedisServer::Start();
    if (!started.ok()) {
      fprintf(stderr,
              "FATAL: relock::testing::SharedRedisServer(): cannot start "
              "redis-server: %s\n",
              started.status().ToString().c_str());
      fflush(stderr);
      abort();
    }
    // Leaked on purpose (a late thread may still hold a reference); stopped
    // at exit by ShutdownAll().
    return started->release();
  }();
  return *server;
}

}  // namespace testing
}  // namespace relock
