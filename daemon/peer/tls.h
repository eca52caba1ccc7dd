// SPDX-License-Identifier: Apache-2.0
// Credentials of the peer service: mutual TLS from PEM files, or plaintext.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "base/status.h"
#include "proto/gradsync/v1/config.pb.h"

namespace gradsync::peer {

struct PeerCredentials {
  std::shared_ptr<grpc::ServerCredentials> server;
  std::shared_ptr<grpc::ChannelCredentials> client;
  bool tls = false;
};

// Reads the PEM files of `tls` (when set): the server then requires and
// verifies client certificates, and clients verify the server. Errors name
// the file that cannot be read.
StatusOr<PeerCredentials> loadPeerCredentials(const v1::DaemonConfig& config);

}  // namespace gradsync::peer
