// The safety harness's private network (netns.h): namespaces, veth pairs
// and nftables tables, made and removed with `ip` and `nft`.

#include "tools/harness/netns.h"

#include <unistd.h>

#include <tuple>

#include "absl/strings/str_cat.h"

namespace relock {
namespace harness {

NetworkLab::~NetworkLab() {
  for (auto it = namespaces_.rbegin(); it != namespaces_.rend(); ++it) {
    (void)RunTool({"ip", "netns", "delete", *it});
  }
  for (const std::string& link : root_links_) {
    (void)RunTool({"ip", "link", "delete", link});  // gone already, usually
  }
}

absl::Status NetworkLab::Probe() {
  absl::StatusOr<std::unique_ptr<NetworkLab>> lab = Create();
  if (!lab.ok()) return lab.status();
  absl::StatusOr<std::string> w = (*lab)->AddWorker(0);
  if (!w.ok()) return w.status();
  if (absl::Status s = (*lab)->Partition(0, Cut::kBoth); !s.ok()) return s;
  return (*lab)->Heal(0);
}

absl::StatusOr<std::unique_ptr<NetworkLab>> NetworkLab::Create() {
  std::unique_ptr<NetworkLab> lab(new NetworkLab(getpid()));
  std::string used;
  if (absl::Status s = RunTool({"ip", "-4", "-o", "addr", "show"}, &used);
      !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("network namespaces unavailable: ", s.message()));
  }
  for (int tries = 0; tries < 100; ++tries) {
    if (used.find(absl::StrCat(" ", lab->net_, ".")) == std::string::npos) {
      break;
    }
    lab->NextNet();
  }
  absl::Status s =
      lab->AddServerNamespace(lab->lock_ns_, lab->Address(1), lab->Name("cl"));
  if (s.ok()) {
    s = lab->AddServerNamespace(lab->counter_ns_, lab->Address(2),
                                lab->Name("cc"));
  }
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot make network namespaces (needs root, iproute2 and "
                     "nftables): ",
                     s.message()));
  }
  return lab;
}

absl::StatusOr<std::string> NetworkLab::AddWorker(int i) {
  if (i < 0 || i > 240) {
    return absl::InvalidArgumentError("at most 241 workers in a lab");
  }
  const std::string ns = Name(absl::StrCat("-w", i));
  const std::string me = Address(10 + i);
  const std::string peer = absl::StrCat("w", i);
  if (absl::Status s = AddNamespace(ns, me); !s.ok()) return s;
  for (const auto& [server, local, server_address] :
       {std::make_tuple(lock_ns_, std::string("vlock"), Address(1)),
        std::make_tuple(counter_ns_, std::string("vctr"), Address(2))}) {
    absl::Status s =
        Run({{"ip", "-n", ns, "link", "add", local, "type", "veth", "peer",
              "name", peer, "netns", server},
             {"ip", "-n", ns, "addr", "add", me + "/32", "dev", local},
             {"ip", "-n", ns, "link", "set", local, "up"},
             {"ip", "-n", ns, "route", "add", server_address + "/32", "dev",
              local, "src", me},
             {"ip", "-n", server, "link", "set", peer, "up"},
             {"ip", "-n", server, "route", "add", me + "/32", "dev", peer,
              "src", server_address}});
    if (!s.ok()) return s;
  }
  return ns;
}

absl::Status NetworkLab::Partition(int i, Cut cut) {
  const std::string me = Address(10 + i);
  const std::string table = absl::StrCat("relock_cut_w", i);
  auto drop_from = [&](const std::string& ns, const std::string& from) {
    return RunTool(
        {"ip", "netns", "exec", ns, "nft",
         absl::StrCat("add table inet ", table, "; add chain inet ", table,
                      " in { type filter hook input priority 0; "
                      "policy accept; }; add rule inet ",
                      table, " in ip saddr ", from, " drop")});
  };
  if (cut != Cut::kReplies) {
    if (absl::Status s = drop_from(lock_ns_, me); !s.ok()) return s;
  }
  if (cut != Cut::kRequests) {
    absl::Status s = drop_from(Name(absl::StrCat("-w", i)), Address(1));
    if (!s.ok()) {
      (void)Heal(i);
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status NetworkLab::Heal(int i) {
  const std::string table = absl::StrCat("relock_cut_w", i);
  absl::Status first;
  for (const std::string& ns : {lock_ns_, Name(absl::StrCat("-w", i))}) {
    std::string tables;
    absl::Status s =
        RunTool({"ip", "netns", "exec", ns, "nft", "list", "tables"}, &tables);
    if (s.ok() && tables.find(table) != std::string::npos) {
      s = RunTool(
          {"ip", "netns", "exec", ns, "nft", "delete", "table", "inet", table});
    }
    if (first.ok()) first = s;
  }
  return first;
}

NetworkLab::NetworkLab(pid_t pid) : pid_(pid) {
  a_ = 100 + (pid_ >> 8) % 100;
  b_ = pid_ & 255;
  net_ = absl::StrCat("10.", a_, ".", b_);
  lock_ns_ = Name("-lock");
  counter_ns_ = Name("-ctr");
}

std::string NetworkLab::Name(const std::string& suffix) const {
  return absl::StrCat("rl", pid_, suffix);
}

std::string NetworkLab::Address(int host) const {
  return absl::StrCat(net_, ".", host);
}

void NetworkLab::NextNet() {
  b_ = (b_ + 1) % 256;
  if (b_ == 0) a_ = 100 + (a_ - 99) % 100;
  net_ = absl::StrCat("10.", a_, ".", b_);
}

absl::Status NetworkLab::Run(
    const std::vector<std::vector<std::string>>& cmds) {
  for (const std::vector<std::string>& c : cmds) {
    if (absl::Status s = RunTool(c); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status NetworkLab::AddNamespace(const std::string& ns,
                                      const std::string& address) {
  if (absl::Status s = RunTool({"ip", "netns", "add", ns}); !s.ok()) return s;
  namespaces_.push_back(ns);
  return Run({{"ip", "-n", ns, "link", "set", "lo", "up"},
              {"ip", "-n", ns, "addr", "add", address + "/32", "dev", "lo"}});
}

absl::Status NetworkLab::AddServerNamespace(const std::string& ns,
                                            const std::string& address,
                                            const std::string& root_link) {
  if (absl::Status s = AddNamespace(ns, address); !s.ok()) return s;
  const std::string root = Address(3);
  absl::Status s = RunTool({"ip", "link", "add", root_link, "type", "veth",
                            "peer", "name", "ctl", "netns", ns});
  if (!s.ok()) return s;
  root_links_.push_back(root_link);
  return Run(
      {{"ip", "addr", "add", root + "/32", "dev", root_link},
       {"ip", "link", "set", root_link, "up"},
       {"ip", "route", "add", address + "/32", "dev", root_link, "src", root},
       {"ip", "-n", ns, "link", "set", "ctl", "up"},
       {"ip", "-n", ns, "route", "add", root + "/32", "dev", "ctl", "src",
        address}});
}

}  // namespace harness
}  // namespace relock
