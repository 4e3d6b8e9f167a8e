#!/usr/bin/env bash
# Runs N processes of `python -m sharedbert.main ARGS...` on this machine's CPU, the way the
# N hosts of a pod run: each process has its own fake CPU devices, they meet at a coordinator
# on localhost and exchange collectives through gloo. For tests and for debugging multi-host
# code on a laptop.
#
# Usage: launch/local_multihost.sh N ARGS...
#   e.g. launch/local_multihost.sh 2 --config=configs/shared_base.py:tiny --workdir=/tmp/mh
#
# Variables (all optional):
#   DEVICES_PER_PROCESS  fake CPU devices in each process (default 1); the mesh spans all
#                        N * DEVICES_PER_PROCESS of them (config.mesh.*)
#   PORT                 the coordinator's port on localhost (default: a free one)
#   LOG_DIR              where process_<i>.log go (default: a new directory under /tmp)
#   PYTHON               the interpreter (default: python3)
#
# Process 0's output is shown here and logged; the others only log. If a process fails, the
# others are stopped and the script exits with its status after showing the end of its log.
# SIGINT/SIGTERM are passed on to every process (a TERM makes them save and exit, as a
# preemption would).
set -euo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

if [[ $# -lt 1 || ! $1 =~ ^[1-9][0-9]*$ ]]; then
  usage >&2
  exit 2
fi
num_processes=$1
shift

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
devices_per_process=${DEVICES_PER_PROCESS:-1}
port=${PORT:-$("$python" -c 'import socket; s = socket.socket(); s.bind(("localhost", 0)); print(s.getsockname()[1])')}
log_dir=${LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/sharedbert_multihost.XXXXXX")}
mkdir -p "$log_dir"
echo "local_multihost: $num_processes processes x $devices_per_process CPU devices," \
  "coordinator localhost:$port, logs in $log_dir" >&2

pids=()
for ((i = 0; i < num_processes; i++)); do
  # The repository on the path, so that this works without `pip install -e .` too.
  PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" \
    JAX_PLATFORMS=cpu \
    JAX_NUM_CPU_DEVICES="$devices_per_process" \
    JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo \
    JAX_COORDINATOR_ADDRESS="localhost:$port" \
    JAX_NUM_PROCESSES="$num_processes" \
    JAX_PROCESS_ID="$i" \
    CUDA_VISIBLE_DEVICES='' \
    TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}" \
    "$python" -m sharedbert.main "$@" >"$log_dir/process_$i.log" 2>&1 &
  pids+=("$!")
done

forward() {
  for pid in "${pids[@]}"; do kill -"$1" "$pid" 2>/dev/null || true; done
}
trap 'forward INT' INT
trap 'forward TERM' TERM

# --pid: tail ends by itself once process 0 has exited and its last lines are printed.
tail -n +1 -f --pid="${pids[0]}" "$log_dir/process_0.log" &
tail_pid=$!

# Wait for all; the first failure stops the rest (they would wait for it forever).
status=0
failed=
running=$num_processes
declare -a done_flags
while ((running > 0)); do
  for ((i = 0; i < num_processes; i++)); do
    [[ -n ${done_flags[i]:-} ]] && continue
    if ! kill -0 "${pids[i]}" 2>/dev/null; then
      rc=0
      wait "${pids[i]}" || rc=$?
      done_flags[i]=1
      running=$((running - 1))
      if ((rc != 0 && status == 0)); then
        status=$rc
        failed=$i
        forward TERM
      fi
    fi
  done
  ((running > 0)) && sleep 1
done
# Let tail print process 0's last lines (it polls about once a second; at most 10 s, also
# on a loaded machine, where a fixed short sleep lost the whole log).
for _ in $(seq 50); do
  kill -0 "$tail_pid" 2>/dev/null || break
  sleep 0.2
done
kill "$tail_pid" 2>/dev/null || true
wait "$tail_pid" 2>/dev/null || true

if ((status == 143)); then
  echo "local_multihost: preempted (exit 143) after saving a checkpoint; run the same" \
    "command again to resume. Logs in $log_dir" >&2
elif ((status != 0)); then
  if [[ $failed != 0 ]]; then
    echo "local_multihost: process $failed failed (exit $status); the end of its log:" >&2
    tail -n 30 "$log_dir/process_$failed.log" >&2
  fi
  echo "local_multihost: process $failed failed with exit status $status; logs in $log_dir" >&2
fi
exit "$status"
