// SPDX-License-Identifier: Apache-2.0
#include "handoff/fd_passing.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace gradsync::handoff {
namespace {

Status waitReadable(int sock, std::chrono::milliseconds timeout) {
  pollfd pfd{sock, POLLIN, 0};
  int n;
  do {
    n = ::poll(&pfd, 1, static_cast<int>(timeout.count()));
  } while (n < 0 && errno == EINTR);
  if (n < 0) return internalError(std::string("poll: ") + std::strerror(errno));
  if (n == 0) return deadlineExceeded("no hand-off message within " + std::to_string(timeout.count()) + " ms");
  return okStatus();
}

}  // namespace

Status sendWithFd(int sock, const void* data, size_t len, int fd) {
  return sendWithFds(sock, data, len, fd >= 0 ? std::vector<int>{fd} : std::vector<int>{});
}

Status sendWithFds(int sock, const void* data, size_t len, const std::vector<int>& fds) {
  if (fds.size() > kMaxFdsPerFrame) {
    return invalidArgument(std::to_string(fds.size()) + " descriptors in one hand-off message (at most " +
                           std::to_string(kMaxFdsPerFrame) + ")");
  }
  iovec iov{const_cast<void*>(data), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerFrame)] = {};
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return unavailable(std::string("sendmsg: ") + std::strerror(errno));
  if (static_cast<size_t>(n) != len) return unavailable("sendmsg: short write");
  return okStatus();
}

namespace {

// One recvmsg of at most `len` bytes; every descriptor that came with it is
// returned in `fds` (the caller owns them). -1 and errno on failure.
ssize_t receive(int sock, void* data, size_t len, int flags, std::vector<int>* fds, int* msg_flags) {
  iovec iov{data, len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerFrame)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | flags);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds->push_back(fd);
    }
  }
  *msg_flags = msg.msg_flags;
  return n;
}

}  // namespace

Status recvWithFd(int sock, void* data, size_t len, UniqueFd* fd, std::chrono::milliseconds timeout) {
  RETURN_IF_ERROR(waitReadable(sock, timeout));
  std::vector<int> fds;
  int flags = 0;
  const ssize_t n = receive(sock, data, len, MSG_WAITALL, &fds, &flags);
  if (n < 0) return unavailable(std::string("recvmsg: ") + std::strerror(errno));
  for (size_t i = 0; i < fds.size(); ++i) {
    if (i == 0) {
      fd->reset(fds[i]);
    } else {
      ::close(fds[i]);  // at most one descriptor is expected
    }
  }
  if (flags & MSG_CTRUNC) return invalidArgument("hand-off message carried too many descriptors");
  if (flags & MSG_TRUNC) return invalidArgument("hand-off message longer than " + std::to_string(len) + " bytes");
  if (static_cast<size_t>(n) != len) {
    return invalidArgument("hand-off message of " + std::to_string(n) + " bytes, expected " + std::to_string(len));
  }
  return okStatus();
}

Status recvMessage(int sock, std::string* out, size_t max, std::chrono::milliseconds timeout,
                   std::vector<UniqueFd>* fds) {
  RETURN_IF_ERROR(waitReadable(sock, timeout));
  out->resize(max);
  std::vector<int> received;
  int flags = 0;
  const ssize_t n = receive(sock, out->data(), max, 0, &received, &flags);
  for (int fd : received) {
    if (fds != nullptr && n > 0) {
      fds->emplace_back(fd);
    } else {
      ::close(fd);
    }
  }
  if (n < 0) {
    out->clear();
    return unavailable(std::string("recvmsg: ") + std::strerror(errno));
  }
  out->resize(static_cast<size_t>(n));
  if (flags & MSG_TRUNC) return invalidArgument("hand-off message longer than " + std::to_string(max) + " bytes");
  if (flags & MSG_CTRUNC) {
    return invalidArgument("hand-off message carried more than " + std::to_string(kMaxFdsPerFrame) + " descriptors");
  }
  return okStatus();
}

Status recvExact(int sock, void* data, size_t len, std::chrono::milliseconds timeout) {
  UniqueFd unexpected;
  RETURN_IF_ERROR(recvWithFd(sock, data, len, &unexpected, timeout));
  if (unexpected.valid()) return invalidArgument("unexpected descriptor in hand-off reply");
  return okStatus();
}

}  // namespace gradsync::handoff
