// relock run: take the lock (or, with --permits, a permit of a
// PermitExpirableSemaphore), run CMD as a child, watch both, release.
//
// How the pieces fit:
//   - Every signal relock forwards (and SIGCHLD) is blocked before the client
//     starts its threads, so no thread takes them; the main thread reads them
//     from a signalfd. An eventfd wakes it for the client's news (the lock
//     lost, the acquire done). One poll() loop then handles CMD's exit, the
//     signals, the loss and the timers (an explicit lease's end, the grace
//     period), without signal handlers.
//   - The lock is held by an explicit relock::Owner, acquired on a helper
//     thread, so that a signal during a long wait still ends relock at once
//     (Close() cancels the wait). A permit is taken the same way; the
//     watchdog renews it and reports its loss as a lock's.
//   - CMD gets PR_SET_PDEATHSIG (SIGTERM with --on-lost term, else SIGKILL)
//     from the main thread, which lives as long as relock: if relock is
//     killed, CMD does not run on unprotected while the lock expires.

#include "tools/relock/run.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "relock/client.h"
#include "relock/limits.h"
#include "relock/owner.h"
#include "tools/relock/flags.h"

namespace relock {
namespace cli {

const char kRunUsage[] =
    R"(usage: relock run [flags] NAME -- CMD [ARGS...]
       relock run --permits N [flags] NAME -- CMD [ARGS...]

Takes the lock NAME, runs CMD (stdin, stdout and stderr inherited), releases
the lock when CMD exits, and exits with CMD's status (128+N if signal N killed
it). The lock is kept alive by the watchdog for as long as CMD runs, unless
--lease gives it a fixed lease.

With --permits N, NAME is a semaphore of N permits (a distributed sem, at
most N commands at once): relock takes one permit of the permit-expirable
semaphore NAME (Redisson's RPermitExpirableSemaphore) instead of the lock,
with the same waits, leases, watchdog, signals, loss handling and exit codes
(75: no permit came; 76: the permit was lost). The first run sets the
semaphore's permits to N (TrySetPermits). If they are set already, N must
be their total (available + out, expired ones included): otherwise relock
exits 2 and says the total, changing nothing (a total is changed by hand, not
by whichever run comes first). A plain Semaphore's taken permits are nobody's
and not counted: use --permits only on semaphores that relock run or other
permit-expirable users share.

flags:
  --permits N           take one of N permits of semaphore NAME (1 to
                        2147483647) instead of the lock NAME
  --wait D              wait at most D for the lock (default: without limit;
                        0 = one attempt)
  --nonblock            one attempt: exit 75 at once if the lock is held
  --lease D             a fixed lease, never renewed: CMD must finish within
                        it, else the lock counts as lost at its end
  --watchdog-timeout D  the watchdog's lease (default 30s, renewed every
                        third of it); a dead relock frees the lock within it
  --on-lost ACTION      when the lock is lost while CMD runs: term (default:
                        SIGTERM, then SIGKILL after --grace), kill (SIGKILL),
                        ignore (let CMD finish); relock then exits 76 however
                        CMD ends
  --grace D             time between SIGTERM and SIGKILL (default 10s;
                        inf: never SIGKILL, wait for CMD to end)
  --url URL, --tls-ca FILE, --tls-cert FILE, --tls-key FILE
                        where Redis is (see relock --help)

With --permits, "the lock" above is the permit: it is released when CMD
ends, renewed by the watchdog, and lost like a lock (its lease ran out, or
its id was removed from NAME's permits).

Signals: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to relock
are passed on to CMD (a SIGINT or SIGQUIT from the terminal already reached CMD
and is not sent twice). While relock still waits for the lock they end it
(exit 128+N). If relock is killed, CMD gets SIGTERM (--on-lost term) or SIGKILL.

A NAME that starts with "-" follows "--": relock run [flags] -- -NAME -- CMD.

Durations: 500ms, 10s, 2m, 1h, inf. Exit codes: see relock --help.
)";

namespace {

enum class OnLost { kTerm, kKill, kIgnore };

// The signals relock passes on to CMD.
constexpr int kForwarded[] = {SIGINT,  SIGTERM, SIGHUP,
                              SIGQUIT, SIGUSR1, SIGUSR2};

// What the client's threads tell the main thread, through an eventfd.
struct News {
  explicit News(int fd) : event_fd(fd) {}
  void Wake() const {
    const uint64_t one = 1;
    // Nothing to do if it fails: the counter is already non-zero.
    (void)!write(event_fd, &one, sizeof(one));
  }
  const int event_fd;
  std::atomic<bool> lost{false};
  std::atomic<bool> acquired_done{false};
  // std::mutex, not absl::Mutex: Debian's Abseil is not instrumented for
  // TSan (lib/common/mutex.h), and this is no place for relock's shim.
  std::mutex mu;
  std::string lost_why;  // guarded by mu
};

// A file descriptor closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

struct RunFlags {
  std::string name;
  std::vector<std::string> command;
  absl::Duration wait = absl::InfiniteDuration();
  absl::optional<absl::Duration> lease;
  OnLost on_lost = OnLost::kTerm;
  absl::Duration grace = absl::Seconds(10);
  // --permits: a permit of the semaphore `name` of this many, not the lock.
  absl::optional<int64_t> permits;
};

// Parses `relock run`'s flags into `*flags` and `*options`.
absl::Status ParseRunFlags(const ParsedArgs& args, RunFlags* flags,
                           ClientOptions* options) {
  if (args.positional.empty()) {
    return absl::InvalidArgumentError(
        "run: missing NAME (relock run [flags] NAME -- CMD [ARGS...])");
  }
  flags->name = args.positional[0];
  flags->command = args.rest;
  if (flags->command.empty()) {
    return absl::InvalidArgumentError(
        "run: missing CMD (relock run [flags] NAME -- CMD [ARGS...])");
  }
  if (args.has("nonblock") && args.has("wait")) {
    return absl::InvalidArgumentError(
        "run: --nonblock and --wait exclude each other");
  }
  if (args.has("nonblock")) flags->wait = absl::ZeroDuration();
  if (args.has("wait")) {
    absl::StatusOr<absl::Duration> d =
        ParseDurationFlag("wait", args.options.at("wait"), /*zero_ok=*/true);
    if (!d.ok()) return d.status();
    flags->wait = *d;
  }
  if (args.has("lease")) {
    absl::StatusOr<absl::Duration> d =
        ParseDurationFlag("lease", args.options.at("lease"), false);
    if (!d.ok()) return d.status();
    flags->lease = *d;
  }
  if (args.has("grace")) {
    absl::StatusOr<absl::Duration> d =
        ParseDurationFlag("grace", args.options.at("grace"), true);
    if (!d.ok()) return d.status();
    flags->grace = *d;
  }
  if (args.has("watchdog-timeout")) {
    absl::StatusOr<absl::Duration> d = ParseDurationFlag(
        "watchdog-timeout", args.options.at("watchdog-timeout"), false);
    if (!d.ok()) return d.status();
    options->lock_watchdog_timeout = *d;
  }
  if (args.has("permits")) {
    const std::string& v = args.options.at("permits");
    int64_t n = 0;
    if (!absl::SimpleAtoi(v, &n) || n < 1 || n > kMaxPermits) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--permits: \"", v, "\" is not a number from 1 to ", kMaxPermits));
    }
    flags->permits = n;
  }
  if (args.has("on-lost")) {
    const std::string& v = args.options.at("on-lost");
    if (v == "term") {
      flags->on_lost = OnLost::kTerm;
    } else if (v == "kill") {
      flags->on_lost = OnLost::kKill;
    } else if (v == "ignore") {
      flags->on_lost = OnLost::kIgnore;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--on-lost: \"", v, "\" is not one of term, kill, ignore"));
    }
  }
  return absl::OkStatus();
}

// Forks and execs `command` with the signal mask `mask` and
// PR_SET_PDEATHSIG(`death_signal`). Returns its pid, or -1 with
// `*exit_code` set after a message (127 not found, 126 not executable).
pid_t StartCommand(const std::vector<std::string>& command, int death_signal,
                   const sigset_t& mask, int* exit_code) {
  // Everything the child needs is made before fork(): between fork() and
  // exec() a child of a threaded process may only make async-signal-safe
  // calls.
  std::vector<char*> argv;
  argv.reserve(command.size() + 1);
  for (const std::string& arg : command) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);
  int error_pipe[2];
  if (pipe2(error_pipe, O_CLOEXEC) != 0) {
    *exit_code =
        Fail(kExitCannotExecute, absl::StrCat("pipe: ", ErrnoText(errno)));
    return -1;
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close(error_pipe[0]);
    close(error_pipe[1]);
    *exit_code =
        Fail(kExitCannotExecute, absl::StrCat("fork: ", ErrnoText(error)));
    return -1;
  }
  if (pid == 0) {
    close(error_pipe[0]);
    prctl(PR_SET_PDEATHSIG, death_signal);
    // relock died before the prctl: act as if the signal came.
    if (getppid() != parent) raise(death_signal);
    signal(SIGPIPE, SIG_DFL);
    // The child has one thread: sigprocmask is its mask (and signal-safe).
    sigprocmask(SIG_SETMASK, &mask, nullptr);  // NOLINT(concurrency-mt-unsafe)
    execvp(argv[0], argv.data());
    const int error = errno;
    (void)!write(error_pipe[1], &error, sizeof(error));
    _exit(kExitNotFound);
  }
  close(error_pipe[1]);
  int error = 0;
  ssize_t n;
  do {
    n = read(error_pipe[0], &error, sizeof(error));
  } while (n < 0 && errno == EINTR);
  close(error_pipe[0]);
  if (n <= 0) return pid;  // exec succeeded (the pipe closed on exec)
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const bool not_found = error == ENOENT || error == ENOTDIR;
  *exit_code =
      Fail(not_found ? kExitNotFound : kExitCannotExecute,
           absl::StrCat(command[0], ": ",
                        not_found ? "command not found" : ErrnoText(error)));
  return -1;
}

// CMD's wait status as an exit code: its status, or 128 + the signal.
int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitFailure;
}

using Steady = std::chrono::steady_clock;

// Milliseconds until `when` for poll(), -1 for never.
// poll() waits at most this long at a time (an int of milliseconds).
constexpr int64_t kMaxPollMs = int64_t{3600} * 1000;

// The steady time `d` from now; nullopt for never (an infinite `d`, or one
// beyond what the clock can represent: absl's conversion saturates, and
// adding the saturated value would wrap into the past).
absl::optional<Steady::time_point> SteadyAfter(absl::Duration d) {
  const Steady::time_point now = Steady::now();
  if (d == absl::InfiniteDuration() ||
      d >= absl::FromChrono(Steady::time_point::max() - now)) {
    return absl::nullopt;
  }
  return now + absl::ToChronoNanoseconds(d);
}

int PollTimeout(absl::optional<Steady::time_point> when) {
  if (!when.has_value()) return -1;
  const absl::Duration left = absl::FromChrono(*when - Steady::now());
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
      kMaxPollMs));
}

void Drain(int event_fd) {
  uint64_t n;
  while (read(event_fd, &n, sizeof(n)) > 0) {
  }
}

// One `relock run`: its descriptors, client, lock and child, and the
// phases that use them.
class Runner {
 public:
  explicit Runner(RunFlags flags) : flags_(std::move(flags)) {}

  // Blocks the signals relock handles (before the client starts any thread,
  // so that only the signalfd gets them) and makes the descriptors.
  absl::Status Prepare() {
    signal(SIGPIPE, SIG_IGN);
    sigset_t handled;
    sigemptyset(&handled);
    for (int sig : kForwarded) sigaddset(&handled, sig);
    sigaddset(&handled, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &handled, &original_mask_);
    signals_ = std::make_unique<Fd>(
        signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK));
    events_ = std::make_unique<Fd>(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (signals_->get() < 0 || events_->get() < 0) {
      return absl::InternalError(
          absl::StrCat("signalfd/eventfd: ", ErrnoText(errno)));
    }
    news_ = std::make_shared<News>(events_->get());
    return absl::OkStatus();
  }

  // Connects with `options` (whose lock events now reach this runner).
  int Connect(ClientOptions options) {
    options.on_lock_event = [news = news_,
                             name = flags_.name](const LockEvent& e) {
      if (e.type != LockEventType::kLockLost || e.lock_name != name) return;
      {
        std::lock_guard<std::mutex> lock(news->mu);
        news->lost_why = std::string(e.status.message());
      }
      news->lost.store(true);
      news->Wake();
    };
    int exit_code = kExitOk;
    client_ = ConnectOrReport(std::move(options), &exit_code);
    if (client_ == nullptr) return exit_code;
    if (!flags_.permits.has_value()) {
      lock_ = client_->GetLock(flags_.name);
      return kExitOk;
    }
    semaphore_ = client_->GetPermitExpirableSemaphore(flags_.name);
    return SetPermits(*flags_.permits);
  }

  // Takes the lock (on a helper thread, so that a signal can end the wait:
  // Close() cancels it). kExitOk once held.
  int Acquire() {
    absl::Status acquired;
    std::thread acquirer([&] {
      acquired = Take();
      news_->acquired_done.store(true);
      news_->Wake();
    });
    int caught = 0;
    while (!news_->acquired_done.load() && caught == 0) {
      Poll(-1);
      for (int sig : ReadSignals()) caught = sig;
    }
    if (caught != 0) client_->Close();  // cancels the wait
    acquirer.join();
    if (caught != 0) return 128 + caught;  // Close() released a late hold
    if (acquired.code() == absl::StatusCode::kDeadlineExceeded) {
      return Fail(
          kExitBusy,
          absl::StrCat(
              What(),
              flags_.permits.has_value() ? " has no free permit" : " is busy",
              flags_.wait == absl::ZeroDuration()
                  ? ""
                  : absl::StrCat(" (waited ", absl::FormatDuration(flags_.wait),
                                 ")")));
    }
    if (absl::IsFailedPrecondition(acquired)) {
      // NAME holds something else: not a lock (of this type), not a count.
      return Fail(kExitFailure, acquired.message());
    }
    if (!acquired.ok()) return Fail(ExitCodeFor(acquired), acquired.message());
    // An explicit lease is safe until SafeUntil(); the watchdog's is renewed
    // and its loss reported as an event.
    if (flags_.lease.has_value() && !flags_.permits.has_value()) {
      absl::StatusOr<Steady::time_point> safe = lock_.SafeUntil(owner_);
      lease_end_ = safe.ok() ? *safe : Steady::now();
    }
    return kExitOk;
  }

  // Runs CMD until it exits, forwarding signals and acting on a loss;
  // releases the lock. The exit code.
  int Supervise() {
    int exit_code = kExitOk;
    child_ = StartCommand(flags_.command,
                          flags_.on_lost == OnLost::kTerm ? SIGTERM : SIGKILL,
                          original_mask_, &exit_code);
    if (child_ < 0) {
      // Best effort: the lease frees the lock otherwise.
      absl::Status released = Give();
      (void)released;
      return exit_code;
    }
    int status = 0;
    while (true) {
      Poll(PollTimeout(lost_ ? kill_at_ : lease_end_));
      for (int sig : ReadSignals(/*from_terminal_too=*/false)) {
        kill(child_, sig);
      }
      if (waitpid(child_, &status, WNOHANG) == child_) break;
      const bool lease_over =
          lease_end_.has_value() && Steady::now() >= *lease_end_;
      if (!lost_ && (news_->lost.load() || lease_over)) OnLost();
      if (kill_at_.has_value() && Steady::now() >= *kill_at_) {
        kill(child_, SIGKILL);
        kill_at_.reset();
      }
    }
    if (lost_) return kExitLost;
    absl::Status released = Give();
    // A permit no longer out (NotFound) was taken from us: lost too.
    if (released.code() == absl::StatusCode::kAborted ||
        (flags_.permits.has_value() &&
         released.code() == absl::StatusCode::kNotFound)) {
      return Fail(kExitLost, absl::StrCat("lost ", What(),
                                          " before the command finished: ",
                                          released.message()));
    }
    if (!released.ok()) {
      // A release that ran and failed after it (Redis refused its unlock
      // message) says so itself; any other may not have run, and leaves
      // the lock (permit) to its lease.
      const bool ran =
          absl::StrContains(released.message(), "refused to publish");
      Fail(kExitOk,
           absl::StrCat("warning: ", released.message(),
                        ran ? ""
                        : flags_.permits.has_value()
                            ? " (the permit returns when its lease ends)"
                            : " (the lock frees itself when its lease ends)"));
    }
    return ExitCodeOf(status);
  }

 private:
  // Waits for a signal, the client's news, or `timeout_ms`.
  void Poll(int timeout_ms) {
    pollfd fds[2] = {{signals_->get(), POLLIN, 0}, {events_->get(), POLLIN, 0}};
    (void)poll(fds, 2, timeout_ms);  // EINTR: look again
    Drain(events_->get());
  }

  // The signals received (not SIGCHLD, which only wakes the loop). Without
  // `from_terminal_too`, a terminal's ^C or ^\ is left out: it went to the
  // whole foreground process group, CMD included.
  std::vector<int> ReadSignals(bool from_terminal_too = true) {
    std::vector<int> sigs;
    signalfd_siginfo info;
    while (read(signals_->get(), &info, sizeof(info)) == sizeof(info)) {
      const int sig = static_cast<int>(info.ssi_signo);
      const bool from_terminal =
          info.ssi_code == SI_KERNEL && (sig == SIGINT || sig == SIGQUIT);
      if (sig != SIGCHLD && (from_terminal_too || !from_terminal)) {
        sigs.push_back(sig);
      }
    }
    return sigs;
  }

  // The lock is lost while CMD runs: do as --on-lost says, in one line.
  void OnLost() {
    lost_ = true;
    std::string why;
    if (news_->lost.load()) {
      std::lock_guard<std::mutex> lock(news_->mu);
      why = news_->lost_why;
    } else {
      why = absl::StrCat("its lease of ", absl::FormatDuration(*flags_.lease),
                         " ran out before the command finished");
    }
    std::string action;
    switch (flags_.on_lost) {
      case OnLost::kTerm:
        kill(child_, SIGTERM);
        kill_at_ = SteadyAfter(flags_.grace);
        action = absl::StrCat(
            "sent SIGTERM to the command (pid ", child_, "), ",
            kill_at_.has_value()
                ? absl::StrCat("SIGKILL follows in ",
                               absl::FormatDuration(flags_.grace))
                : absl::StrCat("no SIGKILL follows (--grace ",
                               absl::FormatDuration(flags_.grace), ")"));
        break;
      case OnLost::kKill:
        kill(child_, SIGKILL);
        action = absl::StrCat("sent SIGKILL to the command (pid ", child_, ")");
        break;
      case OnLost::kIgnore:
        action = absl::StrCat("the command (pid ", child_,
                              ") runs on (--on-lost ignore)");
        break;
    }
    Fail(kExitLost, absl::StrCat("lost ", What(), ": ", why, "; ", action));
  }

  // What relock holds, in messages: lock "NAME", or the permit of semaphore
  // "NAME".
  std::string What() const {
    const std::string quoted = absl::StrCat("\"", flags_.name, "\"");
    if (!flags_.permits.has_value()) return "lock " + quoted;
    if (permit_id_.empty()) return "semaphore " + quoted;
    return absl::StrCat("permit ", permit_id_, " of semaphore ", quoted);
  }

  // --permits: sets the semaphore's permits to `permits` unless they are
  // set; if they are, their total must be `permits` (kExitUsage otherwise).
  int SetPermits(int64_t permits) {
    absl::StatusOr<bool> set = semaphore_.TrySetPermits(permits);
    if (!set.ok()) {
      return Fail(ExitCodeFor(set.status()), set.status().message());
    }
    if (*set) return kExitOk;
    // One script reads the count and the permits out together: their sum
    // does not change as permits come and go.
    absl::StatusOr<SemaphoreInfo> info = client_->InspectSemaphore(flags_.name);
    if (!info.ok()) {
      return Fail(ExitCodeFor(info.status()), info.status().message());
    }
    const int64_t total = info->available + info->permits_out;
    if (total == permits) return kExitOk;
    return Fail(
        kExitUsage,
        absl::StrCat("run: semaphore \"", flags_.name, "\" has ", total,
                     " permits in all (", info->available, " available, ",
                     info->permits_out, " out), not --permits ", permits,
                     "; nothing changed"));
  }

  // Takes the lock or the permit (waiting at most --wait).
  absl::Status Take() {
    if (!flags_.permits.has_value()) {
      return flags_.lease.has_value()
                 ? lock_.TryAcquire(owner_, flags_.wait, *flags_.lease)
                 : lock_.TryAcquire(owner_, flags_.wait);
    }
    const absl::Duration lease =
        flags_.lease.value_or(absl::InfiniteDuration());
    absl::StatusOr<std::string> id =
        flags_.wait == absl::InfiniteDuration()
            ? semaphore_.Acquire(lease)
            : semaphore_.TryAcquire(flags_.wait, lease);
    if (!id.ok()) return id.status();
    permit_id_ = *id;
    if (lease == absl::InfiniteDuration()) return absl::OkStatus();
    // The lease began at an unknown moment of the wait: set it again from a
    // known one (now, before the update), so that lease_end_ is never after
    // its real end.
    const absl::optional<Steady::time_point> end = SteadyAfter(lease);
    absl::Status updated = semaphore_.UpdateLeaseTime(permit_id_, lease);
    if (!updated.ok()) {
      absl::Status released = semaphore_.Release(permit_id_);
      (void)released;  // best effort: the lease ends anyway
      return updated;
    }
    lease_end_ = end;
    return absl::OkStatus();
  }

  // Releases the lock or the permit.
  absl::Status Give() {
    if (!flags_.permits.has_value()) return lock_.Release(owner_);
    return semaphore_.Release(permit_id_);
  }

  const RunFlags flags_;
  sigset_t original_mask_{};
  // Declared before the client, so that they outlive its event thread.
  std::unique_ptr<Fd> signals_;
  std::unique_ptr<Fd> events_;
  std::shared_ptr<News> news_;
  std::unique_ptr<Client> client_;
  Lock lock_;
  const Owner owner_ = Owner::New();
  PermitExpirableSemaphore semaphore_;  // with --permits
  std::string permit_id_;               // the permit taken
  pid_t child_ = -1;
  bool lost_ = false;
  absl::optional<Steady::time_point> lease_end_;  // with --lease
  absl::optional<Steady::time_point> kill_at_;    // SIGKILL after the grace
};

}  // namespace

int Run(const std::vector<std::string>& raw) {
  absl::StatusOr<ParsedArgs> args = ParseArgs(raw,
                                              {{"wait", true},
                                               {"lease", true},
                                               {"nonblock", false},
                                               {"on-lost", true},
                                               {"grace", true},
                                               {"watchdog-timeout", true},
                                               {"permits", true},
                                               {"help", false}},
                                              /*stop_at_positional=*/true);
  if (!args.ok()) {
    return Fail(kExitUsage, absl::StrCat("run: ", args.status().message(),
                                         " (see relock run --help)"));
  }
  if (args->has("help")) {
    std::cout << kRunUsage;
    return kExitOk;
  }
  ClientOptions options = ClientOptionsFrom(*args);
  RunFlags flags;
  if (absl::Status s = ParseRunFlags(*args, &flags, &options); !s.ok()) {
    return Fail(kExitUsage, s.message());
  }
  Runner runner(std::move(flags));
  if (absl::Status s = runner.Prepare(); !s.ok()) {
    return Fail(kExitUnavailable, s.message());
  }
  if (int code = runner.Connect(std::move(options)); code != kExitOk) {
    return code;
  }
  if (int code = runner.Acquire(); code != kExitOk) return code;
  return runner.Supervise();
}

}  // namespace cli
}  // namespace relock
