#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The scale lab's real-daemon part: N gradsyncd on this machine (one rank
each, UCX over loopback TCP), for N in --nodes. For each N: 4 B / 64 KiB /
1 MiB latency of each of --collectives (gradsync_bench's median; default the
allreduce), the ResNet-50 set's step,
and per step of the steady state (the difference between a short and a long
run of each case, so that the start, the first step's negotiation and the
end cancel out): the CPU time of the leader's daemon and of the median
follower's (from /proc), the coordination bytes each sent and received
through the leader, the largest coordination message, the messages a
daemon sent per steady-state round, and the allreduce algorithm chosen
(the daemons' job-end lines). gradsync_bench puts a barrier before each
timed allreduce: its cost is in the CPU and bytes per step.
With --mpi, Open MPI over TCP with N ranks runs the same sizes in the same
run (the peers' allreduce_sweep.py). With --lose-one, an elastic job of N
daemons loses one follower's daemon (SIGKILL): detection and recovery time.
With --swarm-followers, one real leader against the swarm (tools/swarm)
playing that many follower daemons: steps of 161 empty allreduces (the
control plane alone).
Prints one table. A benchmark, not a test. Run by scripts/scale_lab.sh.
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = [4, 65536, 1048576]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


class Daemons:
    """N daemons in a temporary directory; daemon 0 leads the jobs."""

    def __init__(self, binary, n, flags=()):
        self.dir = tempfile.mkdtemp(prefix="gradsync-scale.")
        self.procs, self.logs = [], []
        env = dict(os.environ, UCX_TLS=os.environ.get("UCX_TLS", "tcp"))
        for i in range(n):
            log = os.path.join(self.dir, f"d{i}.log")
            self.logs.append(log)
            with open(log, "w") as out:
                self.procs.append(subprocess.Popen(
                    [binary, "--socket-path", self.socket(i), "--peer-address", "127.0.0.1:0", "--log-level",
                     "info", "--join-timeout-seconds", "60", *flags],
                    stdout=out, stderr=subprocess.STDOUT, env=env))
        self.leader = ""
        deadline = time.time() + 30
        while time.time() < deadline:
            m = re.search(r"peer service on ([0-9.:]+)", self.log(0))
            if m and all(os.path.exists(self.socket(i)) for i in range(n)):
                self.leader = m.group(1)
                break
            time.sleep(0.05)
        if not self.leader:
            self.stop()
            raise RuntimeError("the daemons did not start:\n" + self.log(0))

    def socket(self, i):
        return os.path.join(self.dir, f"d{i}.sock")

    def sockets(self):
        return ",".join(self.socket(i) for i in range(len(self.procs)))

    def log(self, i):
        with open(self.logs[i]) as f:
            return f.read()

    def cpu(self):
        return [cpu_seconds(p.pid) for p in self.procs]

    def ended(self, i):
        """The figures of the last job-end line of daemon i (zeros for those it does not give)."""
        keys = ["messages", "sent", "received", "largest", "rounds", "round_messages", "direct", "doubling", "ring",
                "halving"]
        figures = dict.fromkeys(keys, 0)
        lines = [line for line in self.log(i).splitlines() if re.search(r"job '[^']*' ended: ", line)]
        if not lines:
            return figures
        patterns = {
            ("messages", "sent", "received"): r"coordination ([0-9]+) messages, ([0-9]+) bytes sent, ([0-9]+) received",
            ("largest",): r"largest message ([0-9]+) bytes",
            ("rounds", "round_messages"): r"([0-9]+) steady-state rounds, ([0-9]+) messages",
            ("direct", "doubling", "ring"): r"([0-9]+) direct, ([0-9]+) recursive doubling, ([0-9]+) ring",
            ("halving",): r"([0-9]+) halving-doubling",
        }
        for names, pattern in patterns.items():
            m = re.search(pattern, lines[-1])
            if m:
                figures.update(zip(names, (int(x) for x in m.groups())))
        return figures

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run(["rm", "-rf", self.dir])


def run_bench(args, daemons, n, bench_args):
    """gradsync_bench across the daemons: its stdout, each daemon's CPU seconds and job-end figures."""
    ends_before = [daemons.log(i).count("' ended: ") for i in range(n)]
    before = daemons.cpu()
    out = subprocess.run([args.bench, "--socket", daemons.sockets(), "--leader", daemons.leader, "-np", str(n),
                          *bench_args], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError("gradsync_bench failed:\n" + out.stdout + out.stderr + daemons.log(0)[-4000:])
    deadline = time.time() + 20  # every daemon's job-end line of this run
    while time.time() < deadline and any(daemons.log(i).count("' ended: ") <= ends_before[i] for i in range(n)):
        time.sleep(0.05)
    after = daemons.cpu()
    return out.stdout, [a - b for a, b in zip(after, before)], [daemons.ended(i) for i in range(n)]


class Steady:
    """Per-step figures of the steady state: the difference between a short and a long run of the same
    case, so that the first step's negotiation and the job's start and end cancel out."""

    def __init__(self, short, long, steps):
        (_, cpu_s, end_s), (_, cpu_l, end_l) = short, long
        d = max(1, steps[1] - steps[0])
        self.leader_cpu_us = (cpu_l[0] - cpu_s[0]) / d * 1e6
        self.follower_cpu_us = statistics.median([(cl - cs) / d * 1e6 for cl, cs in zip(cpu_l[1:], cpu_s[1:])])

        def ctl(e):
            return e["sent"] + e["received"]
        self.leader_bytes = (ctl(end_l[0]) - ctl(end_s[0])) / d
        self.follower_bytes = statistics.median([(ctl(el) - ctl(es)) / d for el, es in zip(end_l[1:], end_s[1:])])
        self.largest = max(e["largest"] for e in end_l)
        rounds = max(1, end_l[1]["rounds"])
        self.round_messages = end_l[1]["round_messages"] / rounds  # a follower's, per round
        self.algorithms = {k: end_l[0][k] - end_s[0][k] for k in ("direct", "doubling", "ring", "halving")}


def latency_case(args, daemons, n, size, collective="allreduce"):
    runs, iters = [], []
    for t in (args.min_time / 4, args.min_time):
        out, cpu, ends = run_bench(args, daemons, n, ["--collective", collective, "--min-bytes", str(size),
                                                      "--max-bytes", str(size), "--min-time", str(t),
                                                      *(["--no-barrier"] if args.no_barrier else [])])
        f = next(line.split(",") for line in out.splitlines() if line.startswith("CSV,"))
        runs.append((out, cpu, ends))
        iters.append(int(f[5]))
        median = float(f[6])
    return median, Steady(runs[0], runs[1], iters)


def resnet_case(args, daemons, n):
    runs, steps = [], []
    for k in (2, 2 + args.resnet_steps):
        out, cpu, ends = run_bench(args, daemons, n, ["--resnet", "--steps", str(k)])
        runs.append((out, cpu, ends))
        steps.append(int(re.search(r"steps ([0-9]+)", out).group(1)))
        median = float(re.search(r"median ([0-9.]+) ms", out).group(1))
    return median, Steady(runs[0], runs[1], steps)


def mpi_latency(args, n, size):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), "--mca", "btl", "tcp,self", "--mca",
           "btl_tcp_if_include", "lo", "/usr/bin/python3", os.path.join(args.peers, "allreduce_sweep.py"), "--backend",
           "mpi", "--sizes", str(size), "--min-time", str(args.min_time), "--label", "mpi-tcp"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    for line in out.stdout.splitlines():
        f = line.split(",")
        if line.startswith("CSV,mpi-tcp,") and len(f) > 6:
            return float(f[6])
    return float("nan")


def lose_one(args, n):
    """An elastic job of n daemons (one rank each) loses its last daemon (SIGKILL, with its rank):
    seconds from the kill to the leader's new epoch and to the survivors' first step without it,
    and whether every survivor finished."""
    daemons = Daemons(args.daemon, n)
    try:
        base = dict(os.environ, GRADSYNC_ELASTIC="1", GRADSYNC_MIN_SIZE="2", GRADSYNC_LEADER=daemons.leader,
                    GRADSYNC_JOB_ID="scale-lose-one", GRADSYNC_TOKEN="scale", GRADSYNC_SIZE=str(n),
                    GRADSYNC_LOCAL_RANK="0", GRADSYNC_LOCAL_SIZE="1", GRADSYNC_ARENA_BYTES=str(64 << 20))
        logs = [os.path.join(daemons.dir, f"rank{r}.log") for r in range(n)]
        ranks = []
        for r in range(n):
            env = dict(base, GRADSYNC_SOCKET=daemons.socket(r), GRADSYNC_RANK=str(r))
            with open(logs[r], "w") as out:
                ranks.append(subprocess.Popen([args.worker, "elastic_loop", "10", "0"], env=env, stdout=out,
                                              stderr=subprocess.STDOUT))

        def read(r):
            with open(logs[r]) as f:
                return f.read()

        deadline = time.time() + 120
        while time.time() < deadline and not all("LOOPING" in read(r) for r in range(n)):
            time.sleep(0.1)
        killed_at = time.time()
        daemons.procs[-1].kill()
        ranks[-1].kill()
        detected = None
        while time.time() < killed_at + 60 and detected is None:
            if "job 'scale-lose-one': epoch 1 -> 2" in daemons.log(0):
                detected = time.time()
            time.sleep(0.05)
        ok = True
        for p in ranks[:-1]:
            try:
                ok &= p.wait(timeout=120) == 0
            except subprocess.TimeoutExpired:
                p.kill()
                ok = False
        recovered = [int(m.group(1)) / 1000 for r in range(n - 1)
                     for m in re.finditer(r"RECOVERED epoch 2 at ([0-9]+)", read(r))]
        return ((detected - killed_at) if detected else float("nan"),
                (min(recovered) - killed_at) if recovered else float("nan"), ok)
    finally:
        daemons.stop()


def swarm(args, followers, flags=(), steps=20, tensors=161, ranks_per_follower=1):
    """One real leader (its rank runs the worker's empty_steps) and the swarm playing `followers` follower
    daemons of `ranks_per_follower` ranks each: the swarm's figures line (tools/swarm/swarm.cc)."""
    daemons = Daemons(args.daemon, 1, flags)
    try:
        env = dict(os.environ, GRADSYNC_SOCKET=daemons.socket(0), GRADSYNC_JOB_ID="scale-swarm",
                   GRADSYNC_TOKEN="scale", GRADSYNC_RANK="0", GRADSYNC_SIZE=str(followers * ranks_per_follower + 1),
                   GRADSYNC_LOCAL_RANK="0", GRADSYNC_LOCAL_SIZE="1", GRADSYNC_LEADER=daemons.leader,
                   GRADSYNC_ARENA_BYTES=str(64 << 20))
        with open(os.path.join(daemons.dir, "rank0.log"), "w") as out:
            rank0 = subprocess.Popen([args.worker, "empty_steps", str(steps), str(tensors)], env=env, stdout=out,
                                     stderr=subprocess.STDOUT)
        done = subprocess.run([args.swarm, "--leader", daemons.leader, "--leader-pid", str(daemons.procs[0].pid),
                               "--job", "scale-swarm", "--token", "scale", "--followers", str(followers),
                               "--tensors", str(tensors), "--steps", str(steps), "--timeout-s", "300",
                               "--ranks-per-follower", str(ranks_per_follower)],
                              capture_output=True, text=True, timeout=360)
        rank0.wait(timeout=60)
        line = re.search(r"SWARM .*", done.stdout)
        if done.returncode != 0 or not line:
            return None, done.stderr[-2000:]
        figures = dict(re.findall(r"([a-z_0-9]+)=([0-9.]+)", line.group(0)))
        ended = daemons.ended(0)
        figures["rounds_per_step"] = ended["rounds"] / max(1, steps - 1)
        return figures, ""
    finally:
        daemons.stop()


def swarm_election(args, followers):
    """A real leader and a real candidate (its follower of cross rank 1), both with --leader-failover quorum, and
    the swarm's `followers` simulated follower daemons in one elastic job; the leader is killed once the job
    formed and the swarm's followers all vote for the candidate: the swarm's ELECTION line."""
    daemons = Daemons(args.daemon, 2, ("--leader-failover", "quorum"))
    ranks = []
    try:
        candidate = ""
        deadline = time.time() + 30
        while time.time() < deadline and not candidate:
            m = re.search(r"peer service on ([0-9.:]+)", daemons.log(1))
            candidate = m.group(1) if m else ""
            time.sleep(0.05)
        size = followers + 2
        for r in range(2):
            env = dict(os.environ, GRADSYNC_SOCKET=daemons.socket(r), GRADSYNC_JOB_ID="scale-elect",
                       GRADSYNC_TOKEN="scale", GRADSYNC_RANK=str(r), GRADSYNC_SIZE=str(size), GRADSYNC_LOCAL_RANK="0",
                       GRADSYNC_LOCAL_SIZE="1", GRADSYNC_LEADER=daemons.leader, GRADSYNC_ELASTIC="1",
                       GRADSYNC_MIN_SIZE="2", GRADSYNC_ARENA_BYTES=str(1 << 20))
            with open(os.path.join(daemons.dir, f"rank{r}.log"), "w") as out:
                # Waits in its first step, which the swarm never submits.
                ranks.append(subprocess.Popen([args.worker, "empty_steps", "20", "1"], env=env, stdout=out,
                                              stderr=subprocess.STDOUT))
        done = subprocess.run([args.swarm, "--leader", daemons.leader, "--leader-pid", str(daemons.procs[0].pid),
                               "--job", "scale-elect", "--token", "scale", "--followers", str(followers),
                               "--candidate", candidate, "--candidate-pid", str(daemons.procs[1].pid),
                               "--timeout-s", "300"], capture_output=True, text=True, timeout=420)
        line = re.search(r"ELECTION .*", done.stdout)
        if done.returncode != 0 or not line:
            why = [x for x in done.stderr.splitlines() if "stream ended" not in x]
            return None, "\n".join(why[-20:]) + "\n" + daemons.log(1)[-2000:]
        return dict(re.findall(r"([a-z_0-9]+)=([0-9.]+)", line.group(0))), ""
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait()
        daemons.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--worker", help="tests/integration:worker, for --lose-one")
    ap.add_argument("--peers", help="the peers' scripts (allreduce_sweep.py), for --mpi")
    ap.add_argument("--nodes", default="2,4,8,16")
    ap.add_argument("--daemon-flag", action="append", default=[],
                    help="passed to every daemon of part 2, e.g. --daemon-flag=--link-cost --daemon-flag=fixed")
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--no-barrier", action="store_true",
                    help="gradsync_bench's timed iterations back to back, without the barrier before each (it goes "
                         "through the leader)")
    ap.add_argument("--sizes", default=",".join(str(s) for s in SIZES), help="sizes in bytes")
    ap.add_argument("--collectives", default="allreduce",
                    help="of gradsync_bench's: allreduce,allgather,reducescatter,broadcast,alltoall")
    ap.add_argument("--resnet-steps", type=int, default=8, help="0: no ResNet-50 set")
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--lose-one", action="store_true")
    ap.add_argument("--swarm", help="tools/swarm:swarm, for --swarm-followers")
    ap.add_argument("--swarm-followers", default="", help="e.g. 128,256,512,1024")
    ap.add_argument("--swarm-election", default="",
                    help="e.g. 1024: the leader lost among this many simulated followers, and an election (needs --worker)")
    ap.add_argument("--swarm-ranks", type=int, default=8,
                    help="and the most followers again with this many ranks each (rounds only; 1: not)")
    args = ap.parse_args()
    rows = []
    for n in [int(x) for x in args.nodes.split(",") if x]:
        daemons = Daemons(args.daemon, n, args.daemon_flag)
        try:
            for collective, size in [(c, int(x)) for c in args.collectives.split(",") if c
                                     for x in args.sizes.split(",") if x]:
                median, st = latency_case(args, daemons, n, size, collective)
                allreduce = collective == "allreduce"
                mpi = mpi_latency(args, n, size) if args.mpi and allreduce else float("nan")
                algorithm = max(st.algorithms, key=st.algorithms.get) if any(st.algorithms.values()) else "-"
                rows.append((n, f"{collective} {size} B", f"{median:.1f} us", f"{mpi:.1f} us", st,
                             algorithm if allreduce else "-", 1))
                print(f"# N={n} {collective} {size} B done", file=sys.stderr)
            if args.resnet_steps > 0:
                median, st = resnet_case(args, daemons, n)
                rows.append((n, "ResNet-50 set", f"{median:.1f} ms", "", st, "mixed", 1e3))
                print(f"# N={n} ResNet-50 set done", file=sys.stderr)
        finally:
            daemons.stop()
    print("| N | case | gradsync | Open MPI TCP | leader CPU/step | follower CPU/step | leader ctl B/step |"
          " follower ctl B/step | largest msg | round msgs/daemon | algorithm |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, case, ours, mpi, st, algorithm, unit in rows:
        suffix = " ms" if unit > 1 else " us"
        print(f"| {n} | {case} | {ours} | {'' if mpi in ('', 'nan us') else mpi} |"
              f" {st.leader_cpu_us / unit:.1f}{suffix} | {st.follower_cpu_us / unit:.1f}{suffix} |"
              f" {st.leader_bytes:.0f} | {st.follower_bytes:.0f} | {st.largest} | {st.round_messages:.1f} |"
              f" {algorithm} |")
    if args.lose_one:
        for n in [int(x) for x in args.nodes.split(",") if x]:
            if n < 3:
                continue
            detect, recover, ok = lose_one(args, n)
            print(f"| {n} | one follower's daemon killed (SIGKILL) | new epoch after {detect:.1f} s |"
                  f" first step without it after {recover:.1f} s | {'ok' if ok else 'SURVIVORS FAILED'} |"
                  " | | | | | |")
    if args.swarm and args.swarm_followers:
        print()
        print("| followers | cached steps | first step | step (median, p90) | leader CPU/step |"
              " leader threads joining / running | leader RSS | leader egress B/step | follower B/step out / in |"
              " largest msg | rounds/step |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        counts = [int(x) for x in args.swarm_followers.split(",") if x]
        cases = [(n, m, 1) for n in counts for m in ("rounds", "requests")]
        if counts and args.swarm_ranks > 1:
            # Nodes of 8 ranks; by cache id as every step of an elastic job
            # (fewer steps: each costs seconds at the largest count here).
            cases += [(max(counts), "rounds", args.swarm_ranks), (max(counts), "requests", args.swarm_ranks)]
        for followers, mode, ranks in cases:
            flags = ("--steady-state", "leader") if mode == "requests" else ()
            steps = 8 if ranks > 1 and mode == "requests" else 20
            f, error = swarm(args, followers, flags, steps=steps, ranks_per_follower=ranks)
            what = "rounds through the leader" if mode == "rounds" else "requests by cache id (--steady-state leader)"
            who = f"{followers}" if ranks == 1 else f"{followers} x {ranks} ranks"
            if f is None:
                print(f"| {who} | {what} | FAILED: {error.strip().splitlines()[-1] if error.strip() else '?'} |"
                      " | | | | | | | |")
                continue
            print(f"| {who} | {what} | {float(f['first_step_ms']):.0f} ms |"
                  f" {float(f['step_ms_median']):.1f} ms, {float(f['step_ms_p90']):.1f} ms |"
                  f" {float(f['leader_cpu_ms_per_step']):.1f} ms | {f['leader_threads_joining']} /"
                  f" {f['leader_threads']} | {float(f['leader_rss_mib']):.0f} MiB |"
                  f" {float(f['leader_egress_bytes_per_step']):.0f} | {float(f['follower_tx_bytes_per_step']):.0f} /"
                  f" {float(f['follower_rx_bytes_per_step']):.0f} | {f['largest_message']} |"
                  f" {f['rounds_per_step']:.1f} |")

    if args.swarm and args.swarm_election and args.worker:
        print()
        print("| daemons (simulated voters) | new leader after | all votes answered | candidate threads before / most |"
              " candidate CPU | votes won / refused | a Members call meanwhile |")
        print("|---|---|---|---|---|---|---|")
        for followers in [int(x) for x in args.swarm_election.split(",") if x]:
            f, error = swarm_election(args, followers)
            if f is None:
                last = error.strip().splitlines()[-1] if error.strip() else "?"
                print(f"| {followers + 2} ({followers}) | FAILED: {last} | | | | | |")
                continue
            print(f"| {f['daemons']} ({f['voters']}) | {float(f['new_leader_ms']):.0f} ms |"
                  f" {float(f['all_answered_ms']):.0f} ms | {f['candidate_threads_before']} /"
                  f" {f['candidate_threads_most']} | {float(f['candidate_cpu_ms']):.0f} ms |"
                  f" {f['won']} / {f['refused']} | {float(f['other_call_ms']):.1f} ms |")


if __name__ == "__main__":
    main()
