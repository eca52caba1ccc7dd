# SPDX-License-Identifier: Apache-2.0
"""gradsyncrun: starts the ranks of one job (see launch.main)."""
