#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The clean-root check: proof that an installed gradsync needs nothing of
# the build tree. It bootstraps a minimal Debian 12 root from Debian's
# archive (debootstrap); then, in it:
#   1. apt installs dist/gradsync_*.deb with what its Depends and Recommends
#      pull in (systemd among them), plus Debian's python3-torch and
#      python3-sklearn for the example;
#   2. a training user in group gradsync pip-installs dist/gradsync-*.whl
#      into a fresh virtual environment (with the system's site packages,
#      for Debian's torch);
#   3. boots the root with systemd as its PID 1 (systemd-nspawn --boot) and
#      runs `systemctl enable --now gradsyncd`, as an operator would. Where
#      the container cannot boot (no systemd-nspawn, or inside a container
#      itself), or with GRADSYNC_CLEAN_ROOT_NO_BOOT=1, it starts gradsyncd by
#      hand in a chroot as the unit would (user and group gradsync, the
#      packaged config, umask 0027), and says so;
#   4. as the training user, runs examples/pytorch/train_digits.py on 2 ranks
#      with the environment's gradsyncrun against the system daemon; both
#      ranks must end with identical weights;
#   5. reloads, asks gradsyncctl what the daemon saw, stops it and checks
#      that it exited cleanly.
# Needs root and the network (Debian's archive). Not in .ci/run: about 2
# minutes with the caches warm, more on the first run (downloads).
#   packaging/clean_root_check.sh [--keep]   (--keep: leave the root for a look)
# Downloads are cached in $GRADSYNC_CLEAN_ROOT_CACHE (default
# /var/cache/gradsync-clean-root), so reruns fetch little.
set -euo pipefail
cd "$(dirname "$0")/.."
keep=false
[ "${1:-}" = --keep ] && keep=true
[ "$(id -u)" = 0 ] || { echo "clean_root_check: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
mirror=${GRADSYNC_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${GRADSYNC_CLEAN_ROOT_CACHE:-/var/cache/gradsync-clean-root}
started=$(date +%s)
say() { echo "== [$(($(date +%s) - started)) s] $*"; }
fail() { echo "clean_root_check: $*" >&2; exit 1; }

for tool in debootstrap:debootstrap systemd-nspawn:systemd-container; do
  command -v "${tool%%:*}" >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${tool##*:}" >/dev/null || true
done
command -v debootstrap >/dev/null || fail "debootstrap is missing and apt could not install it"
deb=$(packaging/deb/build_deb.sh | tail -1)
wheel=$(packaging/wheel/build_wheel.sh | tail -1)
say "packages: $(basename "$deb"), $(basename "$wheel")"

root=$(mktemp -d /tmp/gradsync-clean-root.XXXXXX)
chmod 0755 "$root"  # its / (mktemp makes it 0700)
mounts=()
container=   # systemd-nspawn's pid while the root is booted
init=        # the booted root's systemd (PID 1 inside), by its pid out here
daemon_pid=  # gradsyncd's pid when started by hand
unmount_all() {  # deepest first
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
  mounts=()
}
cleanup() {
  [ -n "$daemon_pid" ] && kill -KILL "$daemon_pid" 2>/dev/null
  [ -n "$container" ] && kill -KILL "$container" 2>/dev/null && wait "$container" 2>/dev/null
  unmount_all
  rm -f "$root.boot.log"
  if $keep; then echo "the root is kept in $root"; else rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT
mkdir -p "$cache/debootstrap" "$cache/apt"

say "debootstrap bookworm (minbase) from $mirror"
debootstrap --variant=minbase --cache-dir="$cache/debootstrap" bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
  { tail -20 "$root.debootstrap.log" >&2; fail "debootstrap failed"; }
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
# Runs a command in the root: chrooted until it is booted, then in the
# container's namespaces (where systemctl reaches its systemd).
in_root() {
  local enter=(chroot "$root")
  if [ -n "$init" ]; then enter=(nsenter --target "$init" --mount --uts --ipc --net --pid --); fi
  "${enter[@]}" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"
}
as_trainer() {
  in_root setpriv --reuid=trainer --regid=trainer --init-groups /usr/bin/env HOME=/home/trainer \
    sh -c "cd /home/trainer && $1"
}

say "apt install ./$(basename "$deb") python3-torch python3-sklearn python3-venv"
cp "$deb" "$wheel" examples/pytorch/train_digits.py "$root/tmp/"
chmod 0644 "$root/tmp/"*
in_root apt-get update -q >/dev/null
in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "/tmp/$(basename "$deb")" \
  python3-torch python3-sklearn python3-venv >"$root/tmp/apt.log" 2>&1 || { tail -30 "$root/tmp/apt.log" >&2; fail "apt failed"; }
in_root dpkg -s gradsync | grep -E '^(Version|Depends|Recommends):'
in_root sh -c 'getent passwd gradsync; ls /usr/sbin/gradsyncd /usr/bin/gradsyncctl /lib/systemd/system/gradsyncd.service'
in_root gradsyncd --check-config --config-path /etc/gradsync/gradsyncd.textproto >/dev/null
echo "the packaged config: valid"

say "a training user in group gradsync: pip install $(basename "$wheel") into a fresh venv"
in_root useradd --create-home --groups gradsync trainer
as_trainer "python3 -m venv --system-site-packages venv && venv/bin/pip install -q --no-index /tmp/$(basename "$wheel")"
as_trainer "venv/bin/pip show gradsync | grep -E '^(Name|Version|Location):'"
as_trainer "venv/bin/python -c 'import gradsync, torch; print(\"gradsync from\", gradsync.__file__, \"with torch\", torch.__version__)'"
as_trainer "cp /tmp/train_digits.py ."

container_init() {  # the booted root's systemd (PID 1 inside): a child of nspawn's processes
  local nspawn
  nspawn=$(pgrep -d, -f "systemd-nspawn .*--directory=$root") || return 1
  pgrep -x -P "$nspawn" systemd | head -1 | grep .
}
boot() {  # true once systemd runs in the root
  [ -z "${GRADSYNC_CLEAN_ROOT_NO_BOOT:-}" ] && command -v systemd-nspawn >/dev/null || return 1
  unmount_all  # nspawn mounts its own
  systemd-nspawn --quiet --boot --register=no --keep-unit --directory="$root" >"$root.boot.log" 2>&1 </dev/null &
  container=$!
  local state
  for _ in $(seq 60); do
    init=$(container_init) && state=$(in_root systemctl is-system-running 2>/dev/null || true) || state=
    case $state in running | degraded) return 0 ;; esac
    kill -0 "$container" 2>/dev/null || break
    sleep 0.5
  done
  tail -5 "$root.boot.log" >&2
  kill -KILL "$container" 2>/dev/null; wait "$container" 2>/dev/null; container= init=
  return 1
}

if boot; then
  say "booted with systemd (systemd-nspawn): systemctl enable --now gradsyncd"
  in_root systemctl enable --now gradsyncd 2>&1
  in_root systemctl is-active gradsyncd >/dev/null || { in_root journalctl -u gradsyncd --no-pager | tail -20; fail "gradsyncd is not active"; }
  in_root systemctl status gradsyncd --no-pager --lines=0 | sed -n '1,6p'
else
  say "could not boot the root (see above): gradsyncd started by hand as the unit starts it"
  if [ ${#mounts[@]} = 0 ]; then
    mount_in proc proc -t proc
    mount_in tmpfs run -t tmpfs -o mode=0755
    mount_in /dev dev --bind
  fi
  in_root systemd-tmpfiles --create gradsync.conf
  exec_start=$(sed -n 's/^ExecStart=//p' "$root/lib/systemd/system/gradsyncd.service")
  # chroot, env, setpriv and sh each exec the next: $! is gradsyncd's pid.
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin LANG=C.UTF-8 \
    setpriv --reuid=gradsync --regid=gradsync --init-groups sh -c "umask 0027; exec $exec_start" \
    >"$root/tmp/gradsyncd.log" 2>&1 &
  daemon_pid=$!
fi
for _ in $(seq 100); do
  in_root test -S /run/gradsync/gradsyncd.sock && break
  sleep 0.1
done
in_root ls -l /run/gradsync/
in_root gradsyncctl status | sed -n '1,8p'

say "as the training user: venv/bin/gradsyncrun -np 2 python train_digits.py"
as_trainer "venv/bin/gradsyncrun -np 2 python train_digits.py" >"$root/tmp/train.log" 2>&1 ||
  { tail -30 "$root/tmp/train.log" >&2; fail "the training failed"; }
tail -4 "$root/tmp/train.log"
[ "$(grep -c 'weights identical on all 2 ranks: True' "$root/tmp/train.log")" = 2 ] ||
  fail "the ranks did not both end with identical weights"

if [ -n "$container" ]; then
  say "systemctl reload gradsyncd; gradsyncctl status; systemctl stop gradsyncd"
  in_root systemctl reload gradsyncd
  in_root gradsyncctl status | sed -n '1,3p;/^jobs/p'
  in_root systemctl stop gradsyncd
  in_root systemctl show gradsyncd -p ActiveState -p Result -p ExecMainStatus | paste -sd ' '
  [ "$(in_root systemctl show gradsyncd -p Result --value)" = success ] || fail "gradsyncd did not stop cleanly"
  in_root journalctl -u gradsyncd --no-pager -o cat | grep -E "serving on|ended:|reload|stopped" | tail -5
  in_root systemctl poweroff
  wait "$container" || true
  container= init=
else
  say "gradsyncctl status, then SIGTERM"
  in_root gradsyncctl status | sed -n '1,3p;/^jobs/p'
  kill -TERM "$daemon_pid"
  status=0
  wait "$daemon_pid" || status=$?
  daemon_pid=
  grep -E "ended:|stopped" "$root/tmp/gradsyncd.log" | tail -3 || true
  [ "$status" = 0 ] || { tail -20 "$root/tmp/gradsyncd.log" >&2; fail "gradsyncd exited $status"; }
fi
say "clean_root_check: ok"
