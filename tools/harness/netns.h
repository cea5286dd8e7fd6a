// The safety harness's private network: Linux network namespaces joined by
// veth pairs, and nftables rules that cut a worker off from the lock Redis
// (the partition faults). Made and removed by the coordinator (harness.h);
// needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2 (`ip`) and nftables
// (`nft`).
//
// Layout, for the harness process with pid P (every name carries P, so runs
// side by side do not collide; N = 10.A.B, A.B derived from P and moved on if
// the root namespace already has an address in N.0/24):
//
//   namespace      holds                      address (on its lo)
//   rl<P>-lock     the lock redis-server      N.1
//   rl<P>-ctr      the counter redis-server   N.2   (the protected resource)
//   rl<P>-w<i>     worker process i           N.(10 + i)
//
//        root ns (the harness: faults, checks; N.3)
//         |  rl<P>cl               |  rl<P>cc          control links
//     rl<P>-lock ---- w<i> ---- rl<P>-w<i> ---- w<i> ---- rl<P>-ctr
//                  (lock link: cut        (counter link:
//                   by partitions)         never cut)
//
// Every link is a veth pair with a /32 address at each end and a host route
// to the peer; nothing is forwarded (no namespace routes for another), so no
// packet leaves these namespaces, and the root namespace only gains the two
// control links' routes to N.1 and N.2. A partition is an nftables table in
// the receiving namespace that drops the worker's packets to the lock Redis
// (`requests`, in rl<P>-lock), the lock Redis's packets to the worker
// (`replies`, in rl<P>-w<i>), or both: sockets stay open, nothing is reset,
// TCP just hears nothing back. Heal() deletes the tables.
//
// The destructor deletes every namespace (with its links and tables) and the
// root-side control links; run it after the processes in them are stopped
// (a namespace whose processes still run lives on, unnamed, until they exit).
//
// Part of tools/harness (see harness.h); netns.cc has the definitions.

#ifndef RELOCK_TOOLS_HARNESS_NETNS_H_
#define RELOCK_TOOLS_HARNESS_NETNS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/testing/private_network.h"

namespace relock {
namespace harness {

// Which way a partition drops packets.
enum class Cut : int {
  kBoth = 0,      // partition
  kRequests = 1,  // partition-requests: worker -> lock Redis lost
  kReplies = 2,   // partition-replies: lock Redis -> worker lost
};

// The fixture's (tests/testing/private_network.h): RunTool() runs `ip` and
// `nft`; a worker calls EnterNetns() first thing.
using ::relock::testing::EnterNetns;
using ::relock::testing::RunTool;

class NetworkLab {
 public:
  NetworkLab(const NetworkLab&) = delete;
  NetworkLab& operator=(const NetworkLab&) = delete;
  ~NetworkLab();

  // Why the partition faults cannot run here, or OK: `ip` and `nft` are
  // there and a namespace can be made, given a link and a table, and removed.
  static absl::Status Probe();

  // Makes the lock and counter namespaces and their control links.
  static absl::StatusOr<std::unique_ptr<NetworkLab>> Create();

  const std::string& lock_ns() const { return lock_ns_; }
  const std::string& counter_ns() const { return counter_ns_; }
  std::string lock_host() const { return Address(1); }
  std::string counter_host() const { return Address(2); }

  // Makes worker i's namespace, linked to the lock and the counter
  // namespaces; returns its name (for EnterNetns).
  absl::StatusOr<std::string> AddWorker(int i);

  // Cuts worker i off from the lock Redis (one way or both) until Heal(i).
  absl::Status Partition(int i, Cut cut);

  // Removes worker i's partition tables (those that exist).
  absl::Status Heal(int i);

 private:
  explicit NetworkLab(pid_t pid);

  std::string Name(const std::string& suffix) const;
  std::string Address(int host) const;
  void NextNet();

  static absl::Status Run(const std::vector<std::vector<std::string>>& cmds);

  // A namespace with its loopback up and `address` on it.
  absl::Status AddNamespace(const std::string& ns, const std::string& address);

  // A server's namespace and its control link from the root namespace.
  absl::Status AddServerNamespace(const std::string& ns,
                                  const std::string& address,
                                  const std::string& root_link);

  const pid_t pid_;
  int a_ = 0, b_ = 0;
  std::string net_;  // "10.A.B"
  std::string lock_ns_, counter_ns_;
  std::vector<std::string> namespaces_;  // in the order made
  std::vector<std::string> root_links_;
};

}  // namespace harness
}  // namespace relock

#endif  // RELOCK_TOOLS_HARNESS_NETNS_H_
