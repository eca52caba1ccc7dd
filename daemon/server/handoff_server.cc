// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/handoff_server.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "daemon/common/logging.h"
#include "handoff/fd_passing.h"
#include "handoff/shm_layout.h"

namespace gradsync::server {
namespace {

constexpr auto kHelloTimeout = std::chrono::seconds(5);

std::string errnoText(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

void reply(int fd, const Status& status) {
  handoff::HandoffReply r{};
  r.magic = handoff::kHandoffMagic;
  r.code = static_cast<int32_t>(status.code());
  std::strncpy(r.message, status.message().c_str(), sizeof(r.message) - 1);
  (void)handoff::sendWithFd(fd, &r, sizeof(r), -1);
}

}  // namespace

HandoffServer::~HandoffServer() { stop(); }

Status HandoffServer::start(const std::string& path, uint32_t mode, int gid) {
  path_ = path;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return invalidArgument("hand-off socket path too long: " + path);
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  listen_fd_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listen_fd_.valid()) return internalError(errnoText("socket"));
  ::unlink(path.c_str());
  if (::bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return unavailable(errnoText(("bind " + path).c_str()));
  }
  if (::chmod(path.c_str(), mode) != 0) return internalError(errnoText("chmod hand-off socket"));
  if (gid >= 0 && ::chown(path.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(gid)) != 0) {
    return internalError(errnoText("chown hand-off socket"));
  }
  if (::listen(listen_fd_.get(), 128) != 0) return internalError(errnoText("listen"));
  epoll_fd_.reset(::epoll_create1(EPOLL_CLOEXEC));
  wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!epoll_fd_.valid() || !wake_fd_.valid()) return internalError(errnoText("epoll/eventfd"));
  for (int fd : {listen_fd_.get(), wake_fd_.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return internalError(errnoText("epoll_ctl"));
  }
  thread_ = std::thread([this] { loop(); });
  return okStatus();
}

void HandoffServer::stop() {
  if (!thread_.joinable()) return;
  uint64_t one = 1;
  if (::write(wake_fd_.get(), &one, sizeof(one)) != sizeof(one))
    GS_LOG(handoff, err, "cannot wake the hand-off thread");
  thread_.join();
  connections_.clear();
  ::unlink(path_.c_str());
}

void HandoffServer::loop() {
  epoll_event events[64];
  for (;;) {
    int n = ::epoll_wait(epoll_fd_.get(), events, 64, 1000);
    if (n < 0 && errno != EINTR) {
      GS_LOG(handoff, err, "{}", errnoText("epoll_wait"));
      return;
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_.get()) return;
      if (fd == listen_fd_.get()) {
        acceptOne();
      } else {
        onReadable(fd);
      }
    }
    expireSilent();
  }
}

void HandoffServer::acceptOne() {
  for (;;) {
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or a transient error: epoll tells us again
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      continue;
    }
    Connection connection;
    connection.fd.reset(fd);
    connection.accepted = std::chrono::steady_clock::now();
    connections_.emplace(fd, std::move(connection));
  }
}

void HandoffServer::onReadable(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  Connection& connection = it->second;
  if (connection.session_id != 0) {
    if (!handleFrame(connection)) {
      closeConnection(fd, "disconnected (hand-off connection closed: the process exited or was killed)");
    }
    return;
  }
  Status status = handleHello(connection);
  if (!status.isOk()) {
    GS_LOG(handoff, warn, "hand-off rejected: {}", status.toString());
    reply(fd, status);
    closeConnection(fd, "");
    return;
  }
  reply(fd, okStatus());
}

Status HandoffServer::handleHello(Connection& connection) {
  handoff::HandoffHello hello{};
  UniqueFd memfd;
  RETURN_IF_ERROR(
      handoff::recvWithFd(connection.fd.get(), &hello, sizeof(hello), &memfd, std::chrono::milliseconds(0)));
  if (hello.magic != handoff::kHandoffMagic || hello.version != handoff::kHandoffVersion) {
    return invalidArgument("bad hand-off magic or version");
  }
  auto session = registry_->findSession(hello.session_id);
  if (!session || !session->secretMatches(hello.secret, sizeof(hello.secret))) {
    return unauthenticated("unknown session or wrong session secret");
  }
  if (!memfd.valid()) return invalidArgument("hand-off hello without an arena descriptor");
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(connection.fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return internalError(errnoText("SO_PEERCRED"));
  }
  ASSIGN_OR_RETURN(auto arena, handoff::ShmArena::map(std::move(memfd), limits_.max_arena_bytes, next_color_++));
  const uint64_t arena_bytes = arena->size();
  ASSIGN_OR_RETURN(
      Budget::Lease lease,
      limits_.arena_budget->acquire(arena_bytes, "job '" + session->identity().job_id + "': " + session->describe() +
                                                     "'s arena (max_total_arena_bytes)"));
  RETURN_IF_ERROR(session->attachArena(std::move(arena), std::move(lease), cred.pid));
  connection.session_id = hello.session_id;
  GS_LOG(handoff, info, "job '{}': {} handed over an arena of {} bytes ({})", session->identity().job_id,
         session->describe(), arena_bytes, session->submitRing() ? "with doorbell rings" : "stream only");
  return okStatus();
}

void HandoffServer::closeConnection(int fd, const std::string& cause) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  const uint64_t session_id = it->second.session_id;
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
  connections_.erase(it);
  if (session_id == 0) return;
  auto session = registry_->findSession(session_id);
  // The job learns first (the other ranks get the error at once); then the
  // gone rank's mappings are released (unmapped once their last work is
  // done, without blocking this thread): its memory must not stay pinned.
  if (!cause.empty()) registry_->sessionLost(session_id, cause);
  if (session) session->releaseGpu();
}

void HandoffServer::expireSilent() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<int> silent;
  for (const auto& [fd, connection] : connections_) {
    if (connection.session_id == 0 && now - connection.accepted > kHelloTimeout) silent.push_back(fd);
  }
  for (int fd : silent) closeConnection(fd, "");
}

}  // namespace gradsync::server
