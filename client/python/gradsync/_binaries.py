# SPDX-License-Identifier: Apache-2.0
"""The wheel's gradsyncd and gradsyncctl (in gradsync/_lib, beside the
libraries they need; their RPATH is $ORIGIN): the console scripts of the
same names exec them, so that a pip-only machine can run a private daemon
(gradsyncrun, the torch.distributed backend) with no root and no service."""
import os
import sys

_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib")


def bundled(name):
    """The path of the wheel's `name`, or None (a source checkout, the .deb)."""
    path = os.path.join(_LIB, name)
    return path if os.access(path, os.X_OK) else None


def _exec(name):
    path = bundled(name)
    if path is None:
        sys.exit("%s: not in this gradsync installation (%s)" % (name, _LIB))
    os.execv(path, [name] + sys.argv[1:])


def gradsyncd():
    _exec("gradsyncd")


def gradsyncctl():
    _exec("gradsyncctl")
