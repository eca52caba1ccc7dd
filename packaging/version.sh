#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prints gradsync's version: the daemon's kVersion, the one the packages carry.
set -euo pipefail
sed -n 's/.*kVersion = "\([^"]*\)".*/\1/p' "$(dirname "$0")/../daemon/exe/daemon.h"
