// SPDX-License-Identifier: Apache-2.0
// A small network of "hosts" for tests: one network namespace per host,
// each with a veth link into a bridge in a hub namespace (10.78.0.1,
// 10.78.0.2, ... /24), and the faults a real network has: a cut link,
// random packet loss (nftables), a slow link (a token bucket qdisc).
// Needs root and iproute2 (nftables for loss); available() says whether
// the lab could be built, and tests skip what needs it otherwise.
#pragma once

#include <string>
#include <vector>

namespace gradsync::testutil {

class NetworkLab {
 public:
  explicit NetworkLab(int hosts);
  ~NetworkLab();
  NetworkLab(const NetworkLab&) = delete;
  NetworkLab& operator=(const NetworkLab&) = delete;

  bool available() const { return available_; }
  // Why the lab is not available ("" when it is).
  const std::string& unavailableReason() const { return reason_; }

  // The command prefix that runs a program on host `i`.
  std::vector<std::string> wrapper(int i) const { return {"/usr/sbin/ip", "netns", "exec", hosts_[i]}; }
  std::string address(int i) const { return "10.78.0." + std::to_string(i + 1); }
  // Host i's network device (its end of the veth pair).
  const std::string& device(int i) const { return devices_[i]; }

  // Faults on host i's link, in both directions. Each returns false when
  // the command failed.
  bool cut(int i);
  bool restore(int i);
  bool dropPercent(int i, int percent);
  bool throttle(int i, const std::string& rate);  // e.g. "20mbit"
  bool clearImpairments(int i);
  // A partition: the hosts in `side` reach one another, the others reach
  // one another, and no packet crosses between the two (nftables on every
  // host); heal() ends it.
  bool partition(const std::vector<int>& side);
  bool heal();

 private:
  bool inHost(int i, const std::string& command) const;

  std::string hub_;
  std::vector<std::string> hosts_, devices_, hub_ends_;
  bool available_ = false;
  std::string reason_;
};

}  // namespace gradsync::testutil
