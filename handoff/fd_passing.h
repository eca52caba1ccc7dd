// SPDX-License-Identifier: Apache-2.0
// Passing file descriptors over Unix sockets with SCM_RIGHTS.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "handoff/shm_layout.h"

namespace gradsync::handoff {

// Sends exactly `len` bytes with `fd` attached (fd < 0: none). Blocking.
Status sendWithFd(int sock, const void* data, size_t len, int fd);
// The same with `fds` attached (at most kMaxFdsPerFrame).
Status sendWithFds(int sock, const void* data, size_t len, const std::vector<int>& fds);

// Receives exactly `len` bytes and at most one attached descriptor, waiting
// at most `timeout`. Extra descriptors are closed; a short message, a
// truncated control message or a timeout are errors.
Status recvWithFd(int sock, void* data, size_t len, UniqueFd* fd, std::chrono::milliseconds timeout);

// Receives one whole message (SOCK_SEQPACKET) of at most `max` bytes into
// `out` within `timeout`; the descriptors that come with it go to `fds` when
// given (at most kMaxFdsPerFrame: more are an error), else are closed. OK
// with an empty `out` means the peer closed the connection.
Status recvMessage(int sock, std::string* out, size_t max, std::chrono::milliseconds timeout,
                   std::vector<UniqueFd>* fds = nullptr);

// Receives exactly `len` bytes (no descriptor) within `timeout`.
Status recvExact(int sock, void* data, size_t len, std::chrono::milliseconds timeout);

}  // namespace gradsync::handoff
