// SPDX-License-Identifier: Apache-2.0
// gradsyncd: the gradsync node daemon.
#include "daemon/exe/daemon_main.h"

int main(int argc, char** argv) { return gradsync::exe::daemonMain(argc, argv, nullptr); }
