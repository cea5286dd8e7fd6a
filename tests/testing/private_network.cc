#include "tests/testing/private_network.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace relock {
namespace testing {
namespace {

constexpr int kMaxHosts = 200;
constexpr const char* kSplitTable = "relock_split";

// Runs each command in turn; the first failure.
absl::Status RunAll(const std::vector<std::vector<std::string>>& commands) {
  for (const std::vector<std::string>& argv : commands) {
    if (absl::Status s = RunTool(argv); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunTool(const std::vector<std::string>& argv,
                     std::string* output) {
  std::string path = argv.at(0);
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    const std::string candidate = absl::StrCat(dir, argv[0]);
    if (access(candidate.c_str(), X_OK) == 0) {
      path = candidate;
      break;
    }
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) {
    args.push_back(const_cast<char*>(a.c_str()));
  }
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc =
      posix_spawn(&pid, path.c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat(
        absl::StrJoin(argv, " "), ": cannot run ", path, ": ", strerror(rc)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (output != nullptr) *output = out;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(
        absl::StrCat("`", absl::StrJoin(argv, " "), "` failed: ", out));
  }
  return absl::OkStatus();
}

absl::Status EnterNetns(const std::string& netns) {
  const std::string path = absl::StrCat("/run/netns/", netns);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("open ", path, ": ", strerror(errno)));
  }
  const int rc = setns(fd, CLONE_NEWNET);
  const int err = errno;
  close(fd);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("setns ", path, ": ", strerror(err)));
  }
  return absl::OkStatus();
}

PrivateNetwork::PrivateNetwork(int pid)
    : pid_(pid),
      hub_(absl::StrCat("rs", pid, "-hub")),
      root_link_(absl::StrCat("rs", pid, "c")) {
  // 10.A.B from the pid, A in [100, 227], B in [0, 255]; Create() moves on
  // from a net the root namespace already uses.
  net_ = absl::StrCat("10.", 100 + (pid / 256) % 128, ".", pid % 256);
}

PrivateNetwork::~PrivateNetwork() {
  for (auto it = hosts_.rbegin(); it != hosts_.rend(); ++it) {
    (void)RunTool({"ip", "netns", "delete", it->netns});
  }
  if (made_hub_) (void)RunTool({"ip", "netns", "delete", hub_});
  // Deleting the hub deletes the link's peer, and with it the link.
  if (made_link_) (void)RunTool({"ip", "link", "delete", root_link_});
}

std::string PrivateNetwork::Address(int k) const {
  return absl::StrCat(net_, ".", k);
}

std::string PrivateNetwork::Namespace(absl::string_view name) const {
  return absl::StrCat("rs", pid_, "-", name);
}

std::string PrivateNetwork::control_address() const { return Address(254); }

// Deletes what networks of test processes that are gone left behind (a test
// killed before its destructors ran): namespaces "rs<P>-..." and root links
// "rs<P>c" whose P is no running process.
static void RemoveStale() {
  auto gone = [](absl::string_view name) {
    if (!absl::ConsumePrefix(&name, "rs")) return false;
    const size_t digits = name.find_first_not_of("0123456789");
    int pid = 0;
    if (digits == 0 || digits == absl::string_view::npos ||
        !absl::SimpleAtoi(name.substr(0, digits), &pid)) {
      return false;
    }
    const absl::string_view rest = name.substr(digits);
    if (!absl::StartsWith(rest, "-") && rest != "c") return false;
    return kill(pid, 0) != 0 && errno == ESRCH;
  };
  std::string list;
  if (RunTool({"ip", "netns", "list"}, &list).ok()) {
    for (absl::string_view line : absl::StrSplit(list, '\n')) {
      const std::string name(line.substr(0, line.find(' ')));
      if (gone(name)) (void)RunTool({"ip", "netns", "delete", name});
    }
  }
  std::string links;
  if (RunTool({"ip", "-o", "link", "show"}, &links).ok()) {
    for (absl::string_view line : absl::StrSplit(links, '\n')) {
      // "<index>: <name>@<peer>: <...>"
      std::vector<absl::string_view> parts = absl::StrSplit(line, ": ");
      if (parts.size() < 2) continue;
      const std::string name(parts[1].substr(0, parts[1].find('@')));
      if (gone(name)) (void)RunTool({"ip", "link", "delete", name});
    }
  }
}

absl::StatusOr<std::unique_ptr<PrivateNetwork>> PrivateNetwork::Create() {
  RemoveStale();
  std::unique_ptr<PrivateNetwork> net(new PrivateNetwork(getpid()));
  std::string used;
  absl::Status s = RunTool({"ip", "-4", "-o", "addr", "show"}, &used);
  // Move on while the root namespace has an address in the net.
  for (int tries = 0; s.ok() && tries < 256; ++tries) {
    if (used.find(absl::StrCat(" ", net->net_, ".")) == std::string::npos) {
      break;
    }
    const int b =
        (std::stoi(net->net_.substr(net->net_.rfind('.') + 1)) + 1) % 256;
    net->net_ = absl::StrCat(net->net_.substr(0, net->net_.rfind('.')), ".", b);
  }
  if (s.ok()) {
    s = RunTool({"ip", "netns", "add", net->hub_});
    net->made_hub_ = s.ok();
  }
  if (s.ok()) {
    s = RunAll({{"ip", "-n", net->hub_, "link", "set", "lo", "up"},
                {"ip", "-n", net->hub_, "link", "add", "br0", "type", "bridge"},
                {"ip", "-n", net->hub_, "link", "set", "br0", "up"}});
  }
  if (s.ok()) {
    s = RunTool({"ip", "link", "add", net->root_link_, "type", "veth", "peer",
                 "name", "c0", "netns", net->hub_});
    net->made_link_ = s.ok();
  }
  if (s.ok()) {
    s = RunAll({{"ip", "-n", net->hub_, "link", "set", "c0", "master", "br0"},
                {"ip", "-n", net->hub_, "link", "set", "c0", "up"},
                {"ip", "addr", "add", net->control_address() + "/24", "dev",
                 net->root_link_},
                {"ip", "link", "set", net->root_link_, "up"}});
  }
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot make network namespaces (needs root, iproute2 and "
                     "nftables): ",
                     s.message()));
  }
  return net;
}

absl::StatusOr<PrivateNetwork::Host> PrivateNetwork::AddHost(
    absl::string_view name) {
  const bool valid = !name.empty() && name.size() <= 8 &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'z');
                     });
  if (!valid) {
    return absl::InvalidArgumentError(
        absl::StrCat("PrivateNetwork: host name \"", name,
                     "\" is not 1 to 8 characters of [a-z0-9]"));
  }
  for (const Host& h : hosts_) {
    if (h.name == name) {
      return absl::InvalidArgumentError(
          absl::StrCat("PrivateNetwork: host \"", name, "\" exists"));
    }
  }
  if (hosts_.size() >= kMaxHosts) {
    return absl::InvalidArgumentError(
        absl::StrCat("PrivateNetwork: at most ", kMaxHosts, " hosts"));
  }
  const int k = static_cast<int>(hosts_.size()) + 1;
  Host host{std::string(name), Namespace(name), Address(k)};
  if (absl::Status s = RunTool({"ip", "netns", "add", host.netns}); !s.ok()) {
    return s;
  }
  hosts_.push_back(host);
  const std::string port = absl::StrCat("v", k);
  if (absl::Status s =
          RunAll({{"ip", "-n", host.netns, "link", "set", "lo", "up"},
                  {"ip", "-n", hub_, "link", "add", port, "type", "veth",
                   "peer", "name", "eth0", "netns", host.netns},
                  {"ip", "-n", hub_, "link", "set", port, "master", "br0"},
                  {"ip", "-n", hub_, "link", "set", port, "up"},
                  {"ip", "-n", host.netns, "addr", "add", host.address + "/24",
                   "dev", "eth0"},
                  {"ip", "-n", host.netns, "link", "set", "eth0", "up"}});
      !s.ok()) {
    return s;
  }
  return host;
}

absl::Status PrivateNetwork::Split(const std::vector<std::string>& side) {
  for (const std::string& name : side) {
    if (std::none_of(hosts_.begin(), hosts_.end(),
                     [&](const Host& h) { return h.name == name; })) {
      return absl::InvalidArgumentError(
          absl::StrCat("PrivateNetwork: no host \"", name, "\""));
    }
  }
  auto on_side = [&](const Host& h) {
    return std::find(side.begin(), side.end(), h.name) != side.end();
  };
  const std::string table = absl::StrCat("inet ", kSplitTable);
  for (const Host& h : hosts_) {
    std::vector<std::string> others;
    for (const Host& o : hosts_) {
      if (on_side(o) != on_side(h)) others.push_back(o.address);
    }
    const auto had = std::find(split_.begin(), split_.end(), h.netns);
    if (others.empty()) {
      if (had == split_.end()) continue;
      if (absl::Status s = RunTool({"ip", "netns", "exec", h.netns, "nft",
                                    absl::StrCat("delete table ", table)});
          !s.ok()) {
        return s;
      }
      split_.erase(had);
      continue;
    }
    // One nft transaction per host: its earlier rules go and its new ones
    // come at once (adding a table that exists is no error, so the delete
    // always finds one), so a link cut before and after stays cut
    // throughout, never healed for a moment in between.
    const std::string set =
        absl::StrCat("{ ", absl::StrJoin(others, ", "), " }");
    absl::Status s = RunTool(
        {"ip", "netns", "exec", h.netns, "nft",
         absl::StrCat(
             "add table ", table, "; delete table ", table, "; add table ",
             table, "; add chain ", table,
             " in { type filter hook input priority 0; policy accept; }; "
             "add chain ",
             table,
             " out { type filter hook output priority 0; policy accept; }; "
             "add rule ",
             table, " in ip saddr ", set, " drop; add rule ", table,
             " out ip daddr ", set, " drop")});
    if (!s.ok()) return s;
    if (had == split_.end()) split_.push_back(h.netns);
  }
  return absl::OkStatus();
}

absl::Status PrivateNetwork::Heal() {
  absl::Status first;
  for (const std::string& netns : split_) {
    absl::Status s = RunTool({"ip", "netns", "exec", netns, "nft",
                              absl::StrCat("delete table inet ", kSplitTable)});
    if (first.ok()) first = s;
  }
  split_.clear();
  return first;
}

}  // namespace testing
}  // namespace relock
