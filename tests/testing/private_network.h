// A private switched network for tests that cut links between processes:
// Linux network namespaces on one bridge, and nftables rules that split
// them into two sides (a network partition; a Redis Cluster's split brain).
// Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), iproute2 (`ip`) and nftables
// (`nft`); Create() says FailedPrecondition where they are missing, and a
// test then skips itself (GTEST_SKIP) rather than pass.
//
// Layout, for the test process with pid P (every name carries P, so tests
// side by side do not collide; N = 10.A.B, A.B derived from P and moved on
// while the root namespace already has an address in N.0/24):
//
//   namespace     holds                          address
//   rs<P>-hub     the bridge br0                 -
//   rs<P>-<name>  one host (AddHost), its eth0   N.1, N.2, ... in order
//   (root)        the test process, its link     N.254
//                 rs<P>c into the bridge
//
// Every host reaches every other through the bridge, and the test process
// reaches them all through its link (it starts and checks the servers). No
// host has a default route and the root namespace routes only N.0/24 to the
// link, so no packet leaves these namespaces. Split(side) adds to each host
// an nftables table that drops packets to and from the hosts on the other
// side; sockets stay open and nothing is reset, TCP just hears nothing
// back. The test process is on neither side: it still reaches every host.
// Heal() deletes the tables.
//
// A process joins a host with EnterNetns(host.netns) before it starts any
// thread (a child routine does it first thing: tests/testing/
// child_process.h), or runs in it from the start (RedisServerOptions::netns).
//
// The destructor deletes every namespace and the root link; run it after
// the processes in them stopped (a namespace with processes lives on,
// unnamed, until they exit). Create() first deletes the namespaces and links
// of test processes that are gone (killed before their destructors ran).

#ifndef RELOCK_TESTS_TESTING_PRIVATE_NETWORK_H_
#define RELOCK_TESTS_TESTING_PRIVATE_NETWORK_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace relock {
namespace testing {

// Runs `argv` (argv[0] looked up in /usr/sbin, /sbin, /usr/bin and /bin)
// and waits; its stdout and stderr in *output. Internal (quoting its output)
// unless it exits 0, Unavailable if it cannot be started.
absl::Status RunTool(const std::vector<std::string>& argv,
                     std::string* output = nullptr);

// Moves the calling thread (and the threads it starts later) into network
// namespace `netns` (/run/netns/<netns>). Unavailable if it cannot.
absl::Status EnterNetns(const std::string& netns);

class PrivateNetwork {
 public:
  struct Host {
    std::string name;     // as given to AddHost()
    std::string netns;    // its namespace: rs<P>-<name>
    std::string address;  // N.k
  };

  // Makes the hub and the test process's link. FailedPrecondition (naming
  // what failed) where namespaces cannot be made.
  static absl::StatusOr<std::unique_ptr<PrivateNetwork>> Create();

  PrivateNetwork(const PrivateNetwork&) = delete;
  PrivateNetwork& operator=(const PrivateNetwork&) = delete;
  ~PrivateNetwork();

  // Adds a host on the bridge. `name`: 1 to 8 characters of [a-z0-9];
  // InvalidArgument for another, one already added, or past 200 hosts.
  absl::StatusOr<Host> AddHost(absl::string_view name);

  // Cuts every link between a host named in `side` and a host not named in
  // it, both ways, replacing an earlier split host by host, each in one
  // nftables transaction: a link that both splits cut stays cut throughout
  // (a write held back from a replica by the first split is never delivered
  // in between). InvalidArgument for a name that is no host.
  absl::Status Split(const std::vector<std::string>& side);
  // Removes the split: every host reaches every other again.
  absl::Status Heal();

  // The test process's address on the network.
  std::string control_address() const;

 private:
  explicit PrivateNetwork(int pid);
  std::string Address(int k) const;
  std::string Namespace(absl::string_view name) const;

  const int pid_;
  std::string net_;  // "10.A.B"
  std::string hub_;
  std::string root_link_;
  bool made_hub_ = false;
  bool made_link_ = false;
  std::vector<Host> hosts_;
  std::vector<std::string> split_;  // namespaces with a split table
};

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_PRIVATE_NETWORK_H_
