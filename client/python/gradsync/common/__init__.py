# SPDX-License-Identifier: Apache-2.0
"""Framework-independent parts of Horovod's API: elastic state and the run
loop (gradsync.common.elastic), and its exceptions
(gradsync.common.exceptions), at Horovod's import paths."""
