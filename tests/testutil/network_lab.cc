// SPDX-License-Identifier: Apache-2.0
#include "tests/testutil/network_lab.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace gradsync::testutil {
namespace {

bool sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()) == 0; }

}  // namespace

NetworkLab::NetworkLab(int hosts) {
  const std::string suffix = std::to_string(::getpid() % 100000);
  hub_ = "gshub" + suffix;
  if (!sh("ip netns add " + hub_)) {
    reason_ = "cannot create network namespaces here (needs root and iproute2)";
    return;
  }
  bool ok = sh("ip -n " + hub_ + " link add br0 type bridge") && sh("ip -n " + hub_ + " link set br0 up");
  for (int i = 0; i < hosts && ok; ++i) {
    const std::string n = std::to_string(i);
    hosts_.push_back("gsh" + suffix + "-" + n);
    devices_.push_back("gsd" + suffix + "x" + n);
    hub_ends_.push_back("gsb" + suffix + "x" + n);
    ok = sh("ip netns add " + hosts_[i]) && sh("ip link add " + devices_[i] + " type veth peer name " + hub_ends_[i]) &&
         sh("ip link set " + devices_[i] + " netns " + hosts_[i]) &&
         sh("ip link set " + hub_ends_[i] + " netns " + hub_) &&
         sh("ip -n " + hub_ + " link set " + hub_ends_[i] + " master br0") &&
         sh("ip -n " + hub_ + " link set " + hub_ends_[i] + " up") &&
         sh("ip -n " + hosts_[i] + " addr add " + address(i) + "/24 dev " + devices_[i]) &&
         sh("ip -n " + hosts_[i] + " link set " + devices_[i] + " up") && sh("ip -n " + hosts_[i] + " link set lo up");
  }
  available_ = ok;
  if (!ok) reason_ = "cannot build the namespaces, veth links and bridge of the network lab";
}

NetworkLab::~NetworkLab() {
  for (const std::string& host : hosts_) sh("ip netns del " + host);  // takes its veth pair along
  sh("ip netns del " + hub_);
}

bool NetworkLab::inHost(int i, const std::string& command) const {
  return sh("ip netns exec " + hosts_[i] + " " + command);
}

bool NetworkLab::cut(int i) { return sh("ip -n " + hosts_[i] + " link set " + devices_[i] + " down"); }

bool NetworkLab::restore(int i) { return sh("ip -n " + hosts_[i] + " link set " + devices_[i] + " up"); }

bool NetworkLab::dropPercent(int i, int percent) {
  const std::string rule = "numgen random mod 100 '<' " + std::to_string(percent) + " drop";
  return inHost(i, "nft add table inet gsfault") &&
         inHost(i, "nft add chain inet gsfault in '{ type filter hook input priority 0; }'") &&
         inHost(i, "nft add chain inet gsfault out '{ type filter hook output priority 0; }'") &&
         inHost(i, "nft add rule inet gsfault in iifname " + devices_[i] + " " + rule) &&
         inHost(i, "nft add rule inet gsfault out oifname " + devices_[i] + " " + rule);
}

bool NetworkLab::throttle(int i, const std::string& rate) {
  // Egress from the host, and egress from the hub towards it.
  const std::string tbf = " root tbf rate " + rate + " burst 32kb latency 400ms";
  return inHost(i, "tc qdisc add dev " + devices_[i] + tbf) &&
         sh("ip netns exec " + hub_ + " tc qdisc add dev " + hub_ends_[i] + tbf);
}

bool NetworkLab::clearImpairments(int i) {
  inHost(i, "nft delete table inet gsfault");
  inHost(i, "tc qdisc del dev " + devices_[i] + " root");
  sh("ip netns exec " + hub_ + " tc qdisc del dev " + hub_ends_[i] + " root");
  return restore(i);
}

bool NetworkLab::partition(const std::vector<int>& side) {
  bool ok = true;
  for (int i = 0; i < static_cast<int>(hosts_.size()); ++i) {
    const bool mine = std::count(side.begin(), side.end(), i) > 0;
    std::string across;
    for (int j = 0; j < static_cast<int>(hosts_.size()); ++j) {
      if ((std::count(side.begin(), side.end(), j) > 0) != mine) across += (across.empty() ? "" : ", ") + address(j);
    }
    if (across.empty()) continue;
    ok = ok && inHost(i, "nft add table inet gspart") &&
         inHost(i, "nft add chain inet gspart in '{ type filter hook input priority 0; }'") &&
         inHost(i, "nft add chain inet gspart out '{ type filter hook output priority 0; }'") &&
         inHost(i, "nft add rule inet gspart in ip saddr '{ " + across + " }' drop") &&
         inHost(i, "nft add rule inet gspart out ip daddr '{ " + across + " }' drop");
  }
  return ok;
}

bool NetworkLab::heal() {
  for (size_t i = 0; i < hosts_.size(); ++i) inHost(static_cast<int>(i), "nft delete table inet gspart");
  return true;
}

}  // namespace gradsync::testutil
