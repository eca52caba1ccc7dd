# SPDX-License-Identifier: Apache-2.0
"""Runs elastic_bench.py as `gradsyncrun -np N --min-np N-1` with one rank
on each of N daemons on this machine (N 'hosts' through a fake ssh, see
client/python/fake_hosts.py), so the victim's loss crosses daemons; prints
the rank 0 lines and the recovery figures as JSON."""
import glob
import json
import pathlib
import subprocess
import sys
import tempfile

import fake_hosts

daemons, model_mb = int(sys.argv[1]), sys.argv[2]
bench = str(pathlib.Path(__file__).with_name("elastic_bench.py"))
with tempfile.TemporaryDirectory() as tmp:
    tmp_path, out = pathlib.Path(tmp), pathlib.Path(tmp) / "out"
    out.mkdir()
    hosts = ["node%d" % i for i in range(daemons)]
    with fake_hosts.daemons(tmp_path, hosts) as sockets:
        ssh, env = fake_hosts.ssh_env(tmp_path, sockets)
        run = subprocess.run(["client/python/bin/gradsyncrun", "-np", str(daemons), "--min-np", str(daemons - 1),
                              "--on-rank-failure", "blacklist-host", "-H", ",".join(h + ":1" for h in hosts),
                              "--ssh", ssh, sys.executable, bench, "--model-mb", model_mb, "--out", str(out)],
                             capture_output=True, text=True, timeout=300, env=env)
    for line in run.stdout.splitlines():
        if line.startswith("[0]<stdout>: "):
            print(line[len("[0]<stdout>: "):].replace('"ranks"', '"daemons": %d, "ranks"' % daemons, 1))
    killed = float(open(out / "killed_at").read())
    ranks = [json.load(open(p)) for p in glob.glob(str(out / "rank.*"))]
    print(json.dumps({"daemons": daemons, "ranks": daemons, "survivors": len(ranks),
                      "detect_ms_max": round(max(r["detected"] - killed for r in ranks) * 1e3, 1),
                      "first_collective_of_new_epoch_ms_max":
                          round(max(r["first_collective"] - killed for r in ranks) * 1e3, 1)}))
