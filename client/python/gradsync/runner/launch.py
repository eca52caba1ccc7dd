# SPDX-License-Identifier: Apache-2.0
"""gradsyncrun: runs one job's ranks, like horovodrun.

  gradsyncrun -np 4 python train.py             # this node; private daemon if none runs
  gradsyncrun -np 4 -H a:2,b:2 python train.py  # over ssh, daemons already running there

Each rank gets GRADSYNC_* identity variables, a fresh job id and token; its
output lines are prefixed with its rank; the exit code is that of the first
rank to fail; Ctrl-C (or SIGTERM) stops every rank.
"""
import argparse
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

from gradsync.runner import daemon as daemons
from gradsync.runner.hosts import assign_ranks, is_local, parse_hostfile, parse_hosts

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args(argv):
    p = argparse.ArgumentParser(prog="gradsyncrun", description=__doc__.split("\n\n")[0])
    p.add_argument("-np", "--num-proc", type=int, required=True, help="number of ranks")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-H", "--hosts", help="host:slots,... (default: localhost:np)")
    where.add_argument("--hostfile", help="file of 'host slots=N' lines")
    p.add_argument("--socket", help="gradsyncd socket (default: $GRADSYNC_SOCKET or " + daemons.DEFAULT_SOCKET + ")")
    p.add_argument("--daemon", help="gradsyncd binary for a private daemon (default: $GRADSYNC_DAEMON, PATH)")
    p.add_argument("--daemon-arg", action="append", default=[], help="extra flag for a private gradsyncd")
    p.add_argument("--private-daemon", action="store_true", help="always start a private gradsyncd")
    p.add_argument("--leader", help="peer address (host:port) of rank 0's daemon, for multi-host jobs")
    p.add_argument("--ssh", default=os.environ.get("GRADSYNC_SSH", "ssh -o BatchMode=yes"),
                   help="remote shell command (default: $GRADSYNC_SSH or ssh -o BatchMode=yes)")
    p.add_argument("--job-id", help="job id (default: a fresh one)")
    p.add_argument("--grace", type=float, default=10.0,
                   help="seconds the other ranks get to finish after one fails (default 10)")
    p.add_argument("--no-prefix", action="store_true", help="do not prefix output lines with the rank")
    elastic = p.add_argument_group("elastic (hosts come from -H; discovery adds ranks on those hosts)")
    elastic.add_argument("--min-np", "--min-num-proc", type=int,
                         help="elastic job: when ranks die, the others go on while at least this many remain")
    elastic.add_argument("--max-np", "--max-num-proc", type=int,
                         help="elastic job: the most ranks (default -np)")
    elastic.add_argument("--on-rank-failure", choices=("respawn", "blacklist-host"), default="respawn",
                         help="elastic job: start a replacement for a rank that died (it joins at the next "
                              "commit), or go on without (default respawn; Horovod blacklists the host)")
    elastic.add_argument("--blacklist-cooldown-range", type=float, nargs=2, metavar=("MIN", "MAX"),
                         help="elastic job with --on-rank-failure blacklist-host: a blacklisted host returns after "
                              "MIN, 2*MIN, 4*MIN ... seconds (at most MAX; 1 to 3600) and gets a new rank; "
                              "without it a blacklisted host never returns")
    elastic.add_argument("--host-discovery-script",
                         help="elastic job: a program printing 'host' or 'host:slots' lines, run every second; "
                              "ranks are added (up to --max-np) when a host of the job offers more slots than it "
                              "runs ranks")
    elastic.add_argument("--elastic-timeout", type=float,
                         help="elastic job: seconds it waits for new ranks when fewer than --min-np remain "
                              "(default $GRADSYNC_ELASTIC_TIMEOUT or 600), then fails naming what it lost")
    elastic.add_argument("--reset-limit", type=int,
                         help="elastic job: stop the job when ranks fail more often than this")
    tune = p.add_argument_group("autotune (as horovodrun's): the daemon tunes fusion threshold and cycle time")
    tune.add_argument("--autotune", action="store_true",
                      help="autotune the job (GRADSYNC_AUTOTUNE=1; the daemon logs its choice, gradsyncctl jobs shows it)")
    tune.add_argument("--autotune-warmup-samples", type=int, help="samples not scored at the start (daemon default 3)")
    tune.add_argument("--autotune-steps-per-sample", type=int,
                      help="steps (repetitions of the job's tensors) per sample (daemon default 10)")
    tune.add_argument("--autotune-samples-per-setting", type=int,
                      help="samples whose median scores each setting (daemon default 5)")
    tune.add_argument("--autotune-log-file",
                      help="rank 0 writes each measured setting and the choice there, as CSV (GRADSYNC_AUTOTUNE_LOG)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program each rank runs")
    args = p.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        p.error("no command to run")
    if args.num_proc < 1:
        p.error("-np must be at least 1")
    if (args.max_np is not None or args.host_discovery_script) and args.min_np is None:
        args.min_np = args.num_proc
    if args.min_np is not None and not 1 <= args.min_np <= args.num_proc:
        p.error("--min-np must be in [1, -np]")
    if args.max_np is not None and args.max_np < args.num_proc:
        p.error("--max-np must be at least -np")
    for name, most in (("warmup_samples", 1000), ("steps_per_sample", 10000), ("samples_per_setting", 100)):
        value = getattr(args, "autotune_" + name)
        if value is not None and not 1 <= value <= most:
            p.error("--autotune-%s must be in [1, %d]" % (name.replace("_", "-"), most))
    if args.blacklist_cooldown_range is not None:
        low, high = args.blacklist_cooldown_range
        if not 1 <= low <= high <= 3600:
            p.error("--blacklist-cooldown-range needs 1 <= MIN <= MAX <= 3600")
    return args


def _with_this_python(command):
    """A bare `python` or `python3` runs as the Python gradsyncrun runs on
    (the one it was installed into), not whichever PATH finds first."""
    return [sys.executable] + command[1:] if command[0] in ("python", "python3") else command


def _autotune_env(args):
    """The ranks' GRADSYNC_AUTOTUNE* from the --autotune flags."""
    env = {"GRADSYNC_AUTOTUNE": "1"} if args.autotune else {}
    for name in ("warmup_samples", "steps_per_sample", "samples_per_setting"):
        value = getattr(args, "autotune_" + name)
        if value is not None:
            env["GRADSYNC_AUTOTUNE_" + name.upper()] = str(value)
    if args.autotune_log_file:
        env["GRADSYNC_AUTOTUNE_LOG"] = os.path.abspath(args.autotune_log_file)
    return env


def _leader_of(host, args):
    """Peer address of `host`'s daemon, asked with gradsyncctl."""
    if args.leader:
        return args.leader
    ctl = daemons.find_binary("gradsyncctl", env_var="GRADSYNC_CTL") or "gradsyncctl"
    command = [ctl, "status", "--json"] + (["--socket", args.socket] if args.socket else [])
    if not is_local(host):
        command = shlex.split(args.ssh) + [host, " ".join(shlex.quote(c) for c in command)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError("cannot ask %s's gradsyncd for its peer address (%s); pass --leader"
                           % (host, out.stderr.strip() or out.stdout.strip()))
    status = json.loads(out.stdout)
    address = status.get("peerAddress") or status.get("peer_address")
    if not address:
        raise RuntimeError("%s's gradsyncd has no peer address (start it with --peer-address)" % host)
    bound_host, _, port = address.rpartition(":")
    return "%s:%s" % (host if bound_host in ("0.0.0.0", "[::]", "") else bound_host, port)


class Job:
    """The ranks of one run and their output pumps."""

    def __init__(self, args, placement, socket_path, leader):
        self.args = args
        self.processes = []
        self._starts = []  # (host, env) of each process, for replacements
        self._markers = {}  # replacement index -> the file its client creates once admitted
        self.resets = 0
        self._blacklist = {}  # host -> (times blacklisted, until when: monotonic seconds)
        self._returns = []  # (when, process index): a blacklisted host gets a rank again
        self._removed = set()  # process indices host discovery stopped
        self._leader = leader  # None: the job runs on one daemon, which no other host can join
        self._ignored_hosts = set()  # offered by discovery, unable to join
        self.first_failure = None  # (rank, exit code)
        self._lock = threading.Lock()
        self._pumps = []
        job_id = args.job_id or "gradsyncrun-%s" % secrets.token_hex(6)
        token = secrets.token_hex(16)
        cross_size = len({host for host, _, _, _ in placement})
        for rank, (host, local_rank, local_size, cross_rank) in enumerate(placement):
            env = {"GRADSYNC_JOB_ID": job_id, "GRADSYNC_TOKEN": token, "GRADSYNC_RANK": str(rank),
                   "GRADSYNC_SIZE": str(len(placement)), "GRADSYNC_LOCAL_RANK": str(local_rank),
                   "GRADSYNC_LOCAL_SIZE": str(local_size), "GRADSYNC_CROSS_RANK": str(cross_rank),
                   "GRADSYNC_CROSS_SIZE": str(cross_size)}
            if socket_path:
                env["GRADSYNC_SOCKET"] = socket_path
            if leader:
                env["GRADSYNC_LEADER"] = leader
            env.update(_autotune_env(args))
            if args.min_np is not None:
                env.update(GRADSYNC_ELASTIC="1", HOROVOD_ELASTIC="1", GRADSYNC_MIN_SIZE=str(args.min_np))
                if args.elastic_timeout is not None:
                    env["GRADSYNC_ELASTIC_TIMEOUT"] = str(args.elastic_timeout)
            self._start(rank, host, env)

    def _replace(self, index, why=None):
        """Starts a new rank like process `index` (to replace it, or `why`)
        that joins the running elastic job at its next commit."""
        host, env = self._starts[index]
        self._join(host, env, why or "to replace [%d]" % index)

    def _join(self, host, env, why):
        """Starts a new rank on `host` with `env` that joins the running
        elastic job at its next commit."""
        rank = len(self.processes)
        sys.stderr.write("gradsyncrun: starting [%d] %s; it joins at the next commit\n" % (rank, why))
        marker = os.path.join(tempfile.gettempdir(), "gradsyncrun-%d-joined-%d" % (os.getpid(), rank))
        self._markers[rank] = marker
        self._start(rank, host, dict(env, GRADSYNC_ELASTIC_JOIN="1", GRADSYNC_JOIN_MARKER=marker))

    def admitted(self, index):
        """Whether process `index` is (or was) a rank: an original one, or a
        replacement the job admitted."""
        marker = self._markers.get(index)
        return marker is None or os.path.exists(marker)

    def remove_markers(self):
        for marker in self._markers.values():
            try:
                os.unlink(marker)
            except OSError:
                pass

    def _start(self, rank, host, env):
        self._starts.append((host, env))
        if is_local(host):
            full = dict(os.environ, **env)
            full["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))
            command = _with_this_python(self.args.command)
        else:
            full = dict(os.environ)
            assignments = " ".join("%s=%s" % (k, shlex.quote(v)) for k, v in env.items())
            remote = "cd %s && env %s %s" % (shlex.quote(os.getcwd()), assignments,
                                              " ".join(shlex.quote(c) for c in self.args.command))
            command = shlex.split(self.args.ssh) + [host, remote]
        process = subprocess.Popen(command, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        self.processes.append(process)
        for stream, label, sink in ((process.stdout, "stdout", sys.stdout), (process.stderr, "stderr", sys.stderr)):
            pump = threading.Thread(target=self._pump, args=(rank, stream, label, sink), daemon=True)
            pump.start()
            self._pumps.append(pump)

    def _pump(self, rank, stream, label, sink):
        prefix = b"" if self.args.no_prefix else ("[%d]<%s>: " % (rank, label)).encode()
        out = sink.buffer
        for line in iter(stream.readline, b""):
            with self._lock:
                out.write(prefix + line if line.endswith(b"\n") else prefix + line + b"\n")
                out.flush()

    def signal_all(self, signum):
        for process in self.processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signum)
                except ProcessLookupError:
                    pass

    def discover(self):
        """Runs --host-discovery-script (at most once a second): starts new
        ranks while a host of the job offers more slots than it runs ranks
        (up to --max-np in all), and stops the newest ranks of a host that
        offers fewer (none when it is no longer listed), while --min-np
        remain. A new host's ranks join through its own daemon, which joins
        the running job (a job started on one host without a leader daemon
        cannot take other hosts: such a host is named once and ignored)."""
        now = time.monotonic()
        if not self.args.host_discovery_script or now < getattr(self, "_next_discovery", 0):
            return
        self._next_discovery = now + 1.0
        try:
            out = subprocess.run([self.args.host_discovery_script], capture_output=True, text=True, timeout=10)
            hosts = parse_hosts(",".join(line.strip() for line in out.stdout.splitlines() if line.strip()))
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            sys.stderr.write("gradsyncrun: host discovery failed: %s\n" % e)
            return
        if out.returncode != 0:
            sys.stderr.write("gradsyncrun: host discovery exited with %d\n" % out.returncode)
            return
        if any(p.poll() == 0 for p in self.processes):
            return  # training is over
        most = self.args.max_np or self.args.num_proc
        running = sum(1 for p in self.processes if p.poll() is None)
        offered = dict(hosts)
        for host in {h for h, _ in self._starts}:
            if not any(h == host or is_local(h) and is_local(host) for h in offered):
                running -= self._remove_ranks(host, 0, running)
        for host, slots in hosts:
            if self._blacklisted(host):
                continue
            first = next((i for i, (h, _) in enumerate(self._starts) if h == host or is_local(h) and is_local(host)),
                         None)
            if first is None:
                running += self._add_host(host, slots, most - running)
                continue
            here = sum(1 for i, p in enumerate(self.processes)
                       if p.poll() is None and self._starts[i][0] == self._starts[first][0])
            if here > slots:
                running -= self._remove_ranks(self._starts[first][0], slots, running)
                continue
            for _ in range(max(0, min(slots - here, most - running))):
                sys.stderr.write("gradsyncrun: host discovery offers %d slots %s; starting a new rank\n" %
                                 (slots, "here" if is_local(host) else "on " + host))
                self._replace(first, "to add a rank")
                running += 1

    def _add_host(self, host, slots, room):
        """Starts up to `room` ranks on `host`, new to the job; returns how many."""
        if self._leader is None:
            if host not in self._ignored_hosts:
                self._ignored_hosts.add(host)
                sys.stderr.write("gradsyncrun: host discovery offers %s, but this job runs on one host's daemon "
                                 "without a leader for other hosts to join (start it with -H); ignored\n" % host)
            return 0
        count = max(0, min(slots, room))
        for local_rank in range(count):
            env = dict(self._starts[0][1], GRADSYNC_LOCAL_RANK=str(local_rank), GRADSYNC_LOCAL_SIZE=str(slots))
            self._join(host, env, "on %s, a new host offered by host discovery" % host)
        return count

    def _remove_ranks(self, host, slots, running):
        """Stops the newest ranks on `host` beyond `slots`, keeping at least
        --min-np running in all; returns how many. A SIGKILL: the job moves
        to a new epoch without them, as for a crash (a clean exit would end
        the job), and their exit is not a failure."""
        mine = [i for i, p in enumerate(self.processes) if p.poll() is None and self._starts[i][0] == host]
        count = max(0, min(len(mine) - slots, running - self.args.min_np))
        for index in mine[len(mine) - count:]:
            self._removed.add(index)
            sys.stderr.write("gradsyncrun: host discovery offers %d slots on %s; stopping [%d]\n" % (slots, host, index))
            try:
                os.killpg(self.processes[index].pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return count

    def _elastic_failure(self, failure, interrupted):
        """A rank of an elastic job failed: the others go on; a replacement
        starts unless the job is over, respawning is off, or the reset limit
        is passed (then the job stops: returns the deadline to stop it by)."""
        self.resets += 1
        sys.stderr.write("gradsyncrun: rank %d exited with code %d; the elastic job goes on\n" % failure)
        limit = self.args.reset_limit
        if limit is not None and self.resets > limit:
            sys.stderr.write("gradsyncrun: stopping the job: ranks failed %d times, more than --reset-limit %d\n"
                             % (self.resets, limit))
            interrupted.set()
            self.signal_all(signal.SIGTERM)
            return time.monotonic() + 5
        finished = any(p.poll() == 0 for p in self.processes)
        running = sum(1 for p in self.processes if p.poll() is None)
        most = self.args.max_np or self.args.num_proc
        # Below --min-np the job waits (up to --elastic-timeout) for the replacement.
        if not self.admitted(failure[0]):
            # The job never took it (it failed or ended, or refused it):
            # another replacement would fare no better.
            sys.stderr.write("gradsyncrun: [%d] was never admitted to the job; not replacing it\n" % failure[0])
        elif self.args.on_rank_failure == "respawn" and not finished and 0 < running < most:
            self._replace(failure[0])
        elif self.args.on_rank_failure == "blacklist-host":
            self._blacklist_host(failure[0])
        return None

    def _blacklist_host(self, index):
        """Blacklists the host of process `index`; with a cooldown, schedules
        a new rank there for when it ends."""
        host = self._starts[index][0]
        count = self._blacklist.get(host, (0, 0))[0] + 1
        if self.args.blacklist_cooldown_range is None:
            self._blacklist[host] = (count, float("inf"))
            sys.stderr.write("gradsyncrun: host %s blacklisted for the rest of the job\n" % host)
            return
        low, high = self.args.blacklist_cooldown_range
        delay = min(high, low * 2 ** (count - 1))
        self._blacklist[host] = (count, time.monotonic() + delay)
        self._returns.append((time.monotonic() + delay, index))
        sys.stderr.write("gradsyncrun: host %s blacklisted for %g s (time %d)\n" % (host, delay, count))

    def _blacklisted(self, host):
        return self._blacklist.get(host, (0, 0))[1] > time.monotonic()

    def return_hosts(self):
        """Starts a rank on each host whose blacklist cooldown ended (while the
        job runs and has room)."""
        now = time.monotonic()
        due = [(when, index) for when, index in self._returns if when <= now]
        self._returns = [(when, index) for when, index in self._returns if when > now]
        for _, index in due:
            running = sum(1 for p in self.processes if p.poll() is None)
            if any(p.poll() == 0 for p in self.processes) or running == 0 or \
                    running >= (self.args.max_np or self.args.num_proc):
                continue
            self._replace(index, "on %s, back from its blacklist cooldown" % self._starts[index][0])

    def wait(self, interrupted):
        """Exit code of the first failing rank (0 when all succeed). An
        elastic job goes on when ranks fail: it succeeds when at least
        --min-np ranks do."""
        deadline = None
        elastic = self.args.min_np is not None
        self._failed = set()
        while True:
            running = False
            for rank, process in enumerate(self.processes):
                code = process.poll()
                if code is None:
                    running = True
                elif code != 0 and rank not in self._failed and rank not in self._removed:
                    self._failed.add(rank)
                    failure = (rank, code if code > 0 else 128 - code)
                    self.first_failure = self.first_failure or failure
                    if elastic and not interrupted.is_set():
                        deadline = self._elastic_failure(failure, interrupted)
                    elif deadline is None:
                        deadline = time.monotonic() + self.args.grace
            if not running:
                break
            if elastic and not interrupted.is_set():
                self.discover()
                self.return_hosts()
            if interrupted.is_set() and deadline is None:
                deadline = time.monotonic() + 5
                self.signal_all(signal.SIGTERM)
            if deadline is not None and time.monotonic() > deadline:
                self.signal_all(signal.SIGTERM if not interrupted.is_set() else signal.SIGKILL)
                deadline = time.monotonic() + 5
                interrupted.set()
            time.sleep(0.05)
        for pump in self._pumps:
            pump.join(timeout=5)
        self.remove_markers()
        succeeded = sum(1 for process in self.processes if process.returncode == 0)
        if elastic and self.first_failure is not None and succeeded >= self.args.min_np and not interrupted.is_set():
            return 0
        if self.first_failure is not None:
            rank, code = self.first_failure
            sys.stderr.write("gradsyncrun: rank %d exited with code %d\n" % (rank, code))
            return code
        return 130 if interrupted.is_set() else 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        hosts = parse_hostfile(args.hostfile) if args.hostfile else parse_hosts(args.hosts or
                                                                                "localhost:%d" % args.num_proc)
        placement = assign_ranks(hosts, args.num_proc)
    except (OSError, ValueError) as e:
        sys.stderr.write("gradsyncrun: %s\n" % e)
        return 2
    multi_host = len({host for host, _, _, _ in placement}) > 1
    private = None
    socket_path = args.socket or os.environ.get("GRADSYNC_SOCKET")
    try:
        if not multi_host and is_local(placement[0][0]) and (
                args.private_daemon or not daemons.answers(socket_path or daemons.DEFAULT_SOCKET)):
            private = daemons.PrivateDaemon(daemons.find_binary("gradsyncd", args.daemon, "GRADSYNC_DAEMON"),
                                            args.daemon_arg, owner_pid=os.getpid())
            socket_path = private.socket_path
        leader = _leader_of(placement[0][0], args) if multi_host else None
    except (OSError, RuntimeError, subprocess.SubprocessError, ValueError) as e:
        sys.stderr.write("gradsyncrun: %s\n" % e)
        return 2
    interrupted = threading.Event()
    previous = {s: signal.signal(s, lambda *_: interrupted.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    daemon_code, daemon_log = 0, ""
    try:
        job = Job(args, placement, socket_path, leader)
        result = job.wait(interrupted)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if private is not None:
            daemon_code, daemon_log = private.stop()
    if daemon_code != 0:
        # A private daemon that crashed or did not shut down cleanly fails
        # the run, with its log (a sanitizer's report ends up here too).
        sys.stderr.write("gradsyncrun: the private gradsyncd exited with %d; its log:\n%s" %
                         (daemon_code, daemon_log[-20000:]))
        return result or 1
    return result


if __name__ == "__main__":
    sys.exit(main())
