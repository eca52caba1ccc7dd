// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/tls.h"

#include <fstream>
#include <sstream>

namespace gradsync::peer {
namespace {

StatusOr<std::string> readFile(const std::string& what, const std::string& path) {
  std::ifstream in(path);
  if (!in) return notFound("cannot read the peer TLS " + what + " at " + path);
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().empty()) return invalidArgument("the peer TLS " + what + " at " + path + " is empty");
  return text.str();
}

}  // namespace

StatusOr<PeerCredentials> loadPeerCredentials(const v1::DaemonConfig& config) {
  PeerCredentials credentials;
  if (!config.has_peer_tls()) {
    credentials.server = grpc::InsecureServerCredentials();
    credentials.client = grpc::InsecureChannelCredentials();
    return credentials;
  }
  const auto& tls = config.peer_tls();
  ASSIGN_OR_RETURN(std::string cert, readFile("certificate", tls.cert_path()));
  ASSIGN_OR_RETURN(std::string key, readFile("key", tls.key_path()));
  ASSIGN_OR_RETURN(std::string ca, readFile("CA", tls.ca_path()));
  grpc::SslServerCredentialsOptions server(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  server.pem_root_certs = ca;
  server.pem_key_cert_pairs.push_back({key, cert});
  credentials.server = grpc::SslServerCredentials(server);
  grpc::SslCredentialsOptions client;
  client.pem_root_certs = ca;
  client.pem_private_key = key;
  client.pem_cert_chain = cert;
  credentials.client = grpc::SslCredentials(client);
  credentials.tls = true;
  return credentials;
}

}  // namespace gradsync::peer
