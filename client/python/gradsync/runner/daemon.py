# SPDX-License-Identifier: Apache-2.0
"""The node's gradsyncd for a run: the system one when it answers, else a
private one started for the run and stopped after it."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

DEFAULT_SOCKET = "/run/gradsync/gradsyncd.sock"


def answers(path):
    """True when a daemon accepts connections on the Unix socket `path`."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def find_binary(name, explicit=None, env_var=None):
    """An executable: explicit path, $env_var, PATH, the wheel's copy, or the
    Bazel output of a checkout."""
    for candidate in (explicit, os.environ.get(env_var) if env_var else None):
        if candidate:
            return candidate
    on_path = shutil.which(name)
    if on_path:
        return on_path
    from gradsync import _binaries  # the wheel's own copy
    if _binaries.bundled(name):
        return _binaries.bundled(name)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))))
    for relative in ("daemon/exe/" + name, "tools/gradsyncctl/" + name):
        path = os.path.join(root, "bazel-bin", relative)
        if os.path.exists(path):
            return path
    return None


class PrivateDaemon:
    """A gradsyncd owned by this run, in a fresh temporary directory."""

    def __init__(self, binary, extra_args=(), start_timeout=30.0, owner_pid=None):
        if binary is None:
            raise RuntimeError("no gradsyncd running and none to start: put gradsyncd on PATH, "
                               "set GRADSYNC_DAEMON or pass --daemon")
        self.directory = tempfile.mkdtemp(prefix="gradsyncrun-")
        if len(self.directory) > 80:  # Unix socket paths are limited to 107 bytes
            shutil.rmtree(self.directory)
            self.directory = tempfile.mkdtemp(prefix="gradsyncrun-", dir="/tmp")
        self.socket_path = os.path.join(self.directory, "gradsyncd.sock")
        self.log_path = os.path.join(self.directory, "gradsyncd.log")
        self._log = open(self.log_path, "w")
        # With an owner, the daemon exits once that process has (even when it
        # was killed before it could stop the daemon).
        owner = ["--exit-with-pid", str(owner_pid)] if owner_pid else []
        self._process = subprocess.Popen([binary, "--socket-path", self.socket_path, *owner, *extra_args],
                                         stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + start_timeout
        while not answers(self.socket_path):
            if self._process.poll() is not None:
                raise RuntimeError("private gradsyncd exited with %d:\n%s" % (self._process.returncode,
                                                                               self.log_text()))
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("private gradsyncd did not answer within %.0f s" % start_timeout)
            time.sleep(0.05)

    def log_text(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self, timeout=10.0):
        """SIGTERM, then SIGKILL after `timeout`; removes the directory.
        Returns the daemon's exit code (0: a clean shutdown) and its log."""
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._log.close()
        log = self.log_text()
        shutil.rmtree(self.directory, ignore_errors=True)
        return self._process.returncode, log
