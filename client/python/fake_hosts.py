# SPDX-License-Identifier: Apache-2.0
"""Several 'hosts' on this machine for the gradsyncrun tests: one gradsyncd
per host name (peer service on loopback) and a fake ssh that runs a
command here against that host's daemon."""
import contextlib
import os
import subprocess
import time


@contextlib.contextmanager
def daemons(tmp_path, hosts=("nodeA", "nodeB"), flags=()):
    """Starts a daemon per host; yields {host: socket path}; stops them, and
    fails unless each exits 0 (a crash, a leak report under a sanitizer, a
    shutdown past its limit), with its log."""
    procs, sockets, logs = [], {}, {}
    try:
        for host in hosts:
            sock = str(tmp_path / ("%s.sock" % host))
            logs[host] = str(tmp_path / ("%s.log" % host))
            with open(logs[host], "w") as log:
                procs.append(subprocess.Popen([os.environ["GRADSYNC_DAEMON"], "--socket-path", sock,
                                               "--peer-address", "127.0.0.1:0", *flags],
                                              stdout=log, stderr=subprocess.STDOUT))
            sockets[host] = sock
        deadline = time.monotonic() + 30
        while not all(os.path.exists(s) for s in sockets.values()):
            assert all(p.poll() is None for p in procs) and time.monotonic() < deadline, \
                "daemons did not start:\n" + _read(logs)
            time.sleep(0.05)
        yield sockets
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        codes = {host: p.wait(timeout=15) for host, p in zip(hosts, procs)}
    assert all(code == 0 for code in codes.values()), "daemons exited %s:\n%s" % (codes, _read(logs))


def _read(logs):
    return "".join("--- %s\n%s" % (host, open(path).read()) for host, path in logs.items())


def ssh_env(tmp_path, sockets):
    """Writes the fake ssh; returns (its path, the environment gradsyncrun
    needs for it)."""
    ssh = tmp_path / "fake_ssh"
    ssh.write_text("#!/bin/bash\n# fake ssh HOST COMMAND: runs COMMAND here against HOST's daemon\n"
                   "host=$1; shift; var=FAKE_SOCKET_$host; export GRADSYNC_SOCKET=${!var}\n"
                   "exec bash -c \"$*\"\n")
    ssh.chmod(0o755)
    env = dict(os.environ, **{"FAKE_SOCKET_" + h: s for h, s in sockets.items()})
    env.pop("GRADSYNC_SOCKET", None)
    return str(ssh), env
