#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The clean-root check: proof that an installed gradsync needs nothing of
# the build tree. It bootstraps a minimal Debian 12 root from Debian's
# archive (debootstrap), then inside it (chroot):
#   1. apt installs dist/gradsync_*.deb with what its Depends pull in, plus
#      Debian's python3-torch and python3-sklearn for the example;
#   2. starts gradsyncd as the unit would (user and group gradsync, the
#      packaged config, umask 0027), since systemd is not PID 1 in a chroot;
#   3. as a training user in group gradsync, pip-installs dist/gradsync-*.whl
#      into a fresh virtual environment (with the system's site packages, for
#      Debian's torch) and runs examples/pytorch/train_digits.py on 2 ranks
#      with that environment's gradsyncrun against the system daemon;
#   4. asks gradsyncctl what the daemon saw, stops it with SIGTERM and checks
#      that it exited cleanly.
# Needs root and the network (Debian's archive). Not in .ci/run: about 3
# minutes with the caches warm, more on the first run (downloads).
#   packaging/clean_root_check.sh [--keep]   (--keep: leave the root for a look)
# Downloads are cached in $GRADSYNC_CLEAN_ROOT_CACHE (default
# /var/cache/gradsync-clean-root), so reruns fetch nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
keep=false
[ "${1:-}" = --keep ] && keep=true
[ "$(id -u)" = 0 ] || { echo "clean_root_check: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
mirror=${GRADSYNC_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${GRADSYNC_CLEAN_ROOT_CACHE:-/var/cache/gradsync-clean-root}
started=$(date +%s)
say() { echo "== [$(($(date +%s) - started)) s] $*"; }

command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
deb=$(packaging/deb/build_deb.sh | tail -1)
wheel=$(packaging/wheel/build_wheel.sh | tail -1)
say "packages: $(basename "$deb"), $(basename "$wheel")"

root=$(mktemp -d /tmp/gradsync-clean-root.XXXXXX)
mounts=()
cleanup() {
  # The daemon first (if it is still up), then the mounts, deepest first.
  if [ -f "$root/run/gradsyncd.pid" ]; then kill -KILL "$(cat "$root/run/gradsyncd.pid")" 2>/dev/null || true; fi
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
  if $keep; then echo "the root is kept in $root"; else rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT
mkdir -p "$cache/debootstrap" "$cache/apt"

say "debootstrap bookworm (minbase) from $mirror"
debootstrap --variant=minbase --cache-dir="$cache/debootstrap" bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
  { tail -20 "$root.debootstrap.log" >&2; exit 1; }
rm -f "$root.debootstrap.log"
mount_in() {  # mount_in SOURCE TARGET [OPTIONS...]
  mkdir -p "$root/$2"
  mount "${@:3}" "$1" "$root/$2"
  mounts+=("$root/$2")
}
mount_in proc proc -t proc
mount_in sysfs sys -t sysfs
mount_in /dev dev --bind
mount_in devpts dev/pts -t devpts -o newinstance,ptmxmode=0666
mount_in tmpfs dev/shm -t tmpfs -o mode=1777
mount_in tmpfs run -t tmpfs -o mode=0755
mount_in "$cache/apt" var/cache/apt/archives --bind
cp /etc/resolv.conf "$root/etc/resolv.conf"
echo "deb $mirror bookworm main" >"$root/etc/apt/sources.list"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

say "apt install ./$(basename "$deb") python3-torch python3-sklearn python3-venv"
cp "$deb" "$wheel" "$root/tmp/"
cp examples/pytorch/train_digits.py "$root/tmp/"
in_root apt-get update -q >/dev/null
in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "/tmp/$(basename "$deb")" \
  python3-torch python3-sklearn python3-venv >"$root/tmp/apt.log" 2>&1 || { tail -30 "$root/tmp/apt.log" >&2; exit 1; }
in_root dpkg -s gradsync | grep -E '^(Version|Depends|Recommends):'
in_root sh -c 'getent passwd gradsync; ls -ld /run/gradsync; ls /usr/sbin/gradsyncd /usr/bin/gradsyncctl /lib/systemd/system/gradsyncd.service'
in_root gradsyncd --check-config --config-path /etc/gradsync/gradsyncd.textproto >/dev/null
echo "the packaged config: valid"

say "gradsyncd started as the unit starts it (User=gradsync, UMask=0027)"
# ExecStart of the packaged unit, without systemd: its RuntimeDirectory is
# made by the package's tmpfiles entry (above), the rest by hand.
exec_start=$(sed -n 's/^ExecStart=//p' "$root/lib/systemd/system/gradsyncd.service")
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin LANG=C.UTF-8 \
  setpriv --reuid=gradsync --regid=gradsync --init-groups sh -c "umask 0027; exec $exec_start" \
  >"$root/tmp/gradsyncd.log" 2>&1 &
echo $! >"$root/run/gradsyncd.pid"
for _ in $(seq 100); do
  [ -S "$root/run/gradsync/gradsyncd.sock" ] && break
  kill -0 "$(cat "$root/run/gradsyncd.pid")" 2>/dev/null || { cat "$root/tmp/gradsyncd.log" >&2; exit 1; }
  sleep 0.1
done
ls -l "$root/run/gradsync/"
in_root gradsyncctl --socket /run/gradsync/gradsyncd.sock status | head -8

say "a training user in group gradsync: pip install $(basename "$wheel") into a fresh venv, then gradsyncrun -np 2"
in_root useradd --create-home --groups gradsync trainer
in_root chmod 0644 "/tmp/$(basename "$wheel")" /tmp/train_digits.py
as_trainer() {
  chroot --userspec=trainer:trainer --groups=gradsync "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/home/trainer \
    LANG=C.UTF-8 sh -c "cd /home/trainer && $1"
}
as_trainer "python3 -m venv --system-site-packages venv && venv/bin/pip install -q --no-index /tmp/$(basename "$wheel")"
as_trainer "venv/bin/pip show gradsync | head -3; venv/bin/python -c 'import gradsync, torch; print(\"gradsync from\", gradsync.__file__, \"with torch\", torch.__version__)'"
as_trainer "cp /tmp/train_digits.py . && venv/bin/gradsyncrun -np 2 python train_digits.py" | tee "$root/tmp/train.log" | tail -4
grep -q "accuracy" "$root/tmp/train.log" || { echo "clean_root_check: the training printed no accuracy" >&2; exit 1; }

say "gradsyncctl, then SIGTERM"
in_root gradsyncctl --socket /run/gradsync/gradsyncd.sock status | head -12
pid=$(cat "$root/run/gradsyncd.pid")
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
rm -f "$root/run/gradsyncd.pid"
grep -E "job '.*' ended|exiting|stopped" "$root/tmp/gradsyncd.log" | tail -3 || true
[ "$status" = 0 ] || { echo "gradsyncd exited $status" >&2; tail -20 "$root/tmp/gradsyncd.log" >&2; exit 1; }
[ "$PWD" = "$repo" ]
say "clean_root_check: ok (gradsyncd exited 0)"
