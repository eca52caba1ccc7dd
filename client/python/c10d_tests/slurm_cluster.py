# SPDX-License-Identifier: Apache-2.0
"""A one-node Slurm cluster for a test: Debian's munged, slurmctld and
slurmd, each in the foreground with its files in a temporary directory
and its own ports, started and stopped by the test (as root)."""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_CONF = """ClusterName=gradsynctest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={dir}/munge.sock
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
LaunchParameters=use_interactive_step
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
NodeName=localhost NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def available():
    return all(shutil.which(b) for b in ("munged", "slurmctld", "slurmd", "srun", "sinfo")) and os.geteuid() == 0


@contextlib.contextmanager
def cluster(ready_timeout=60):
    """Yields the environment (SLURM_CONF) under which srun reaches it. The
    node is named localhost (what SLURM_JOB_NODELIST then holds resolves on
    any machine)."""
    directory = tempfile.mkdtemp(prefix="slurm-", dir="/tmp")
    host = socket.gethostname().split(".")[0]
    for sub in ("state", "spool"):
        os.makedirs(os.path.join(directory, sub))
    key = os.path.join(directory, "munge.key")
    with open(key, "wb") as f:
        f.write(os.urandom(1024))
    os.chmod(key, 0o400)
    conf = os.path.join(directory, "slurm.conf")
    with open(conf, "w") as f:
        f.write(_CONF.format(host=host, dir=directory, cpus=os.cpu_count(), ctld_port=_free_port(),
                             d_port=_free_port()))
    env = dict(os.environ, SLURM_CONF=conf)
    processes = []
    try:
        processes.append(subprocess.Popen(
            ["munged", "--foreground", "--force", "--socket=%s/munge.sock" % directory, "--key-file=%s" % key,
             "--pid-file=%s/munged.pid" % directory, "--log-file=%s/munged.log" % directory,
             "--seed-file=%s/munged.seed" % directory], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        _wait(lambda: os.path.exists(os.path.join(directory, "munge.sock")), 10, "munged", directory)
        processes.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", conf], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        processes.append(subprocess.Popen(["slurmd", "-D", "-f", conf, "-N", "localhost"], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        _wait(lambda: _idle(env), ready_timeout, "slurmd to register as idle", directory)
        yield env
    finally:
        for process in reversed(processes):
            process.send_signal(signal.SIGTERM)
        for process in reversed(processes):
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(directory, ignore_errors=True)


def _idle(env):
    out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True, timeout=10)
    return out.returncode == 0 and out.stdout.strip() in ("idle", "mix")


def _wait(ready, timeout, what, directory):
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            logs = ""
            for name in ("munged.log", "slurmctld.log", "slurmd.log"):
                path = os.path.join(directory, name)
                if os.path.exists(path):
                    with open(path) as f:
                        logs += "== %s\n%s\n" % (name, f.read()[-3000:])
            raise RuntimeError("timed out waiting for %s:\n%s" % (what, logs))
        time.sleep(0.2)
