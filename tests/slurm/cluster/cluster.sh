#!/bin/bash
# tests/slurm/cluster/cluster.sh start STATE_DIR [NODE_NAME...]    (then: export SLURM_CONF=STATE_DIR/slurm.conf)
# tests/slurm/cluster/cluster.sh stop STATE_DIR
#
# A real Slurm cluster on this machine for tests/slurm/test_real_slurm.py: munged on a socket of its
# own, slurmctld, and one slurmd per NODE_NAME (default: n1; "localhost" will not do, Slurm reads it as this machine's hostname), every node a stand-in for a GPU
# node with GPUS gres "gpu" devices (default 2; stand-in character devices, since Slurm 22.05 drops a
# gpu gres without File=) and CPUS CPUs (default: this machine's). Each node name must resolve to
# this machine: a job's head address is its first node's name (slurm/launch.sh). Everything (config,
# key, spool, logs, pids) lives in STATE_DIR; nothing under /etc or /run is touched. Run as root
# (Debian's slurm-wlm and munge installed: make test-slurm installs them). Ports: CTLD_PORT (default
# 16817), the nodes' from CTLD_PORT + 1 on.
#
# "start" records every daemon's pid in STATE_DIR/pids as it starts it and waits until all nodes are
# idle; if that fails it stops what it started and prints the daemons' logs. "stop" cancels every job
# and waits for them to end (30 s at most), ends each recorded pid (TERM, then KILL after 10 s), then
# kills any job step left behind (a slurmstepd working in STATE_DIR, and its processes).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cmd="${1:?usage: cluster.sh start|stop STATE_DIR [NODE_NAME...]}"
state="${2:?usage: cluster.sh start|stop STATE_DIR [NODE_NAME...]}"
shift 2
mkdir -p "$state"
state="$(cd "$state" && pwd)"
export SLURM_CONF="$state/slurm.conf"

# ours PID NAME: PID is still the daemon NAME (slurmd-n1 -> slurmd) recorded at start, not a reused pid.
ours() {
  [[ $(cat "/proc/$1/comm" 2>/dev/null) == "${2%%-*}" ]]
}

stop() {
  [[ -f $state/pids ]] || return 0
  local pid name jobs
  # Every job cancelled and gone first (needs slurmctld: best effort), then the daemons by pid.
  jobs="$(timeout 5 squeue -h -o %i 2>/dev/null || true)"
  if [[ -n $jobs ]]; then
    # shellcheck disable=SC2086
    timeout 5 scancel $jobs >/dev/null 2>&1 || true
    for _ in $(seq 60); do
      [[ -z $(timeout 5 squeue -h -o %i 2>/dev/null || true) ]] && break
      sleep 0.5
    done
  fi
  while read -r pid name; do
    if ours "$pid" "$name"; then kill -TERM "$pid" 2>/dev/null || true; fi
  done <"$state/pids"
  for _ in $(seq 100); do
    local alive=0
    while read -r pid name; do
      if ours "$pid" "$name"; then alive=1; fi
    done <"$state/pids"
    ((alive)) || break
    sleep 0.1
  done
  while read -r pid name; do
    if ours "$pid" "$name"; then
      echo "cluster: $name (pid $pid) ignored TERM: KILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done <"$state/pids"
  # A job step whose slurmd went first (slurmstepd runs in STATE_DIR/log) and what it started.
  local steps=() table
  for pid in $(pgrep -x slurmstepd || true); do
    [[ $(readlink "/proc/$pid/cwd" 2>/dev/null) == "$state"/* ]] && steps+=("$pid")
  done
  if ((${#steps[@]})); then
    table="$(ps -eo pid=,ppid=)"
    local todo=("${steps[@]}") all=()
    while ((${#todo[@]})); do
      pid="${todo[-1]}"
      unset 'todo[-1]'
      all+=("$pid")
      # shellcheck disable=SC2207
      todo+=($(awk -v p="$pid" '$2 == p { print $1 }' <<<"$table"))
    done
    echo "cluster: killing ${#all[@]} leftover job process(es): ${all[*]}" >&2
    kill -KILL "${all[@]}" 2>/dev/null || true
  fi
  mv "$state/pids" "$state/pids.stopped"
}

# record NAME PIDFILE: wait for a daemon's pid file and add its pid to STATE_DIR/pids.
record() {
  local name="$1" file="$2"
  for _ in $(seq 100); do
    if [[ -s $file ]]; then
      echo "$(cat "$file") $name" >>"$state/pids"
      return 0
    fi
    sleep 0.1
  done
  echo "cluster: $name wrote no pid file $file" >&2
  return 1
}

fail() {
  echo "cluster: $*" >&2
  for f in "$state"/log/*.log; do
    [[ -f $f ]] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
  done
  stop
  exit 1
}

start() {
  (($# > 0)) || set -- n1
  [[ ! -f $state/pids ]] || fail "already started ($state/pids exists): stop it first"
  local ctld_port="${CTLD_PORT:-16817}" gpus="${GPUS:-2}" cpus="${CPUS:-$(nproc)}" nodes="" port name
  mkdir -p "$state"/{munge,key,ctld,spool,run,log,dev}
  chmod 755 "$state/munge" # the socket's folder: every user may connect
  chmod 700 "$state/key"
  port=$ctld_port
  for name in "$@"; do
    port=$((port + 1))
    local files=()
    for ((g = 0; g < gpus; g++)); do
      [[ -e $state/dev/$name-gpu$g ]] || mknod "$state/dev/$name-gpu$g" c 1 3 # /dev/null's numbers
      files+=("$state/dev/$name-gpu$g")
    done
    nodes+="NodeName=$name NodeAddr=127.0.0.1 Port=$port CPUs=$cpus Gres=gpu:$gpus State=UNKNOWN"$'\n'
    echo "NodeName=$name Name=gpu File=$(IFS=,; echo "${files[*]}")" >>"$state/gres.conf.new"
  done
  mv "$state/gres.conf.new" "$state/gres.conf"
  sed -e "s|@STATE@|$state|g" -e "s|@CTLD_PORT@|$ctld_port|g" "$here/slurm.conf.in" |
    awk -v nodes="$nodes" '{ if ($0 == "@NODES@") printf "%s", nodes; else print }' >"$SLURM_CONF"

  [[ -f $state/key/munge.key ]] || { dd if=/dev/urandom of="$state/key/munge.key" bs=1024 count=1 status=none; chmod 400 "$state/key/munge.key"; }
  : >"$state/pids"
  munged --force --socket="$state/munge/munge.socket" --key-file="$state/key/munge.key" \
    --pid-file="$state/run/munged.pid" --log-file="$state/log/munged.log" --seed-file="$state/key/seed" ||
    fail "munged did not start"
  record munged "$state/run/munged.pid" || fail "munged did not start"
  slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
  record slurmctld "$state/run/slurmctld.pid" || fail "slurmctld did not start"
  for name in "$@"; do
    slurmd -f "$SLURM_CONF" -N "$name" || fail "slurmd $name did not start"
    record "slurmd-$name" "$state/run/slurmd-$name.pid" || fail "slurmd $name did not start"
  done
  for _ in $(seq 300); do
    if [[ $(sinfo -h -N -o '%t' 2>/dev/null | grep -c '^idle') == "$#" ]]; then
      echo "cluster: $# node(s) idle ($*), SLURM_CONF=$SLURM_CONF"
      return 0
    fi
    sleep 0.2
  done
  sinfo -N -l >&2 || true
  fail "the node(s) never became idle"
}

case "$cmd" in
  start) start "$@" ;;
  stop) stop ;;
  *) echo "usage: cluster.sh start|stop STATE_DIR [NODE_NAME...]" >&2; exit 2 ;;
esac
