# SPDX-License-Identifier: Apache-2.0
"""gradsync: gradient synchronization through the node's gradsyncd.

`gradsync.torch` is the PyTorch API (Horovod's); this package holds what is
independent of any framework: the binding of libgradsync and the errors.
"""
from gradsync.errors import GradsyncError

__version__ = "0.1.0"
__all__ = ["GradsyncError", "__version__"]
