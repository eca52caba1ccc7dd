// SPDX-License-Identifier: Apache-2.0
#include "daemon/handoff/fd_passing.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>

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

void closeAll(cmsghdr* cmsg) {
  size_t n = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
  int* fds = reinterpret_cast<int*>(CMSG_DATA(cmsg));
  for (size_t i = 0; i < n; ++i) {
    int fd;
    std::memcpy(&fd, fds + i, sizeof(int));
    ::close(fd);
  }
}

}  // namespace

Status sendWithFd(int sock, const void* data, size_t len, int fd) {
  iovec iov{const_cast<void*>(data), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return unavailable(std::string("sendmsg: ") + std::strerror(errno));
  if (static_cast<size_t>(n) != len) return unavailable("sendmsg: short write");
  return okStatus();
}

Status recvWithFd(int sock, void* data, size_t len, UniqueFd* fd, std::chrono::milliseconds timeout) {
  RETURN_IF_ERROR(waitReadable(sock, timeout));
  iovec iov{data, len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return unavailable(std::string("recvmsg: ") + std::strerror(errno));
  bool got_fd = false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    if (!got_fd && c->cmsg_len == CMSG_LEN(sizeof(int))) {
      int received;
      std::memcpy(&received, CMSG_DATA(c), sizeof(int));
      fd->reset(received);
      got_fd = true;
    } else {
      closeAll(c);
    }
  }
  if (msg.msg_flags & MSG_CTRUNC) return invalidArgument("hand-off message carried too many descriptors");
  if (msg.msg_flags & MSG_TRUNC) return invalidArgument("hand-off message longer than " + std::to_string(len) + " bytes");
  if (static_cast<size_t>(n) != len) {
    return invalidArgument("hand-off message of " + std::to_string(n) + " bytes, expected " + std::to_string(len));
  }
  return okStatus();
}

Status recvMessage(int sock, std::string* out, size_t max, std::chrono::milliseconds timeout) {
  RETURN_IF_ERROR(waitReadable(sock, timeout));
  out->resize(max);
  iovec iov{out->data(), max};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    out->clear();
    return unavailable(std::string("recvmsg: ") + std::strerror(errno));
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) closeAll(c);
  }
  out->resize(static_cast<size_t>(n));
  if (msg.msg_flags & MSG_TRUNC) return invalidArgument("hand-off message longer than " + std::to_string(max) + " bytes");
  return okStatus();
}

Status recvExact(int sock, void* data, size_t len, std::chrono::milliseconds timeout) {
  UniqueFd unexpected;
  RETURN_IF_ERROR(recvWithFd(sock, data, len, &unexpected, timeout));
  if (unexpected.valid()) return invalidArgument("unexpected descriptor in hand-off reply");
  return okStatus();
}

}  // namespace gradsync::handoff
