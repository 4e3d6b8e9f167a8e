#!/usr/bin/env bash
# Runs `python -m sharedbert.main ARGS...` on every worker of a Cloud TPU VM slice (a pod
# slice such as v4-32 has several hosts; each runs one process over its local chips, and
# sharedbert.main joins them with jax.distributed.initialize()).
#
# Usage: TPU_NAME=my-v4-32 ZONE=us-central2-b launch/tpu_pod.sh ARGS...
#   e.g. TPU_NAME=my-v4-32 ZONE=us-central2-b launch/tpu_pod.sh \
#          --config=configs/shared_base.py --workdir=gs://my-bucket/runs/shared_base \
#          --config.data.tfds_data_dir=gs://my-bucket/tfds --config.model.dtype=bfloat16
#
# Variables:
#   TPU_NAME    (required) the TPU VM slice, as created by `gcloud compute tpus tpu-vm create`
#   ZONE        (required) its zone
#   PROJECT     the Google Cloud project (default: gcloud's configured project)
#   REMOTE_DIR  where the code goes on every worker (default: sharedbert, under the home dir)
#   INSTALL     1 (default): make REMOTE_DIR/.venv and `pip install -e .[tpu]` there on
#               every worker (only the first time: later runs reuse it); 0: skip
#   DETACH      0 (default): stay attached and stream every worker's output here (run this
#               from tmux or screen: closing the connection stops the run); 1: start the run
#               in the background on the workers and return (follow it with the command
#               printed at the end; it resumes from its last checkpoint if restarted)
#   GCLOUD      the gcloud command (default: gcloud)
#
# The workdir must be where every worker can write (gs://...). Each worker also writes its
# own log to REMOTE_DIR/logs/<worker hostname>.log; only process 0 logs at INFO level and
# writes metrics. The code copied is this checkout's tracked and untracked, not ignored files.
set -euo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

if [[ -z ${TPU_NAME:-} || -z ${ZONE:-} || $# -eq 0 ]]; then
  usage >&2
  exit 2
fi

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
remote_dir=${REMOTE_DIR:-sharedbert}
gcloud=${GCLOUD:-gcloud}
where=(--zone="$ZONE")
if [[ -n ${PROJECT:-} ]]; then
  where+=(--project="$PROJECT")
fi

on_all_workers() {
  "$gcloud" compute tpus tpu-vm ssh "$TPU_NAME" "${where[@]}" --worker=all --command="$1"
}

# 1. Copy the code to every worker.
archive=$(mktemp "${TMPDIR:-/tmp}/sharedbert_code.XXXXXX")
trap 'rm -f "$archive"' EXIT
(cd "$repo" && git ls-files -z --cached --others --exclude-standard |
  tar --null -T - -czf "$archive")
echo "tpu_pod: copying the code to every worker of $TPU_NAME (~/$remote_dir)" >&2
"$gcloud" compute tpus tpu-vm scp "$archive" "$TPU_NAME":sharedbert_code.tgz "${where[@]}" \
  --worker=all
on_all_workers "mkdir -p $(printf %q "$remote_dir") && tar -xzf sharedbert_code.tgz -C $(printf %q "$remote_dir") && rm sharedbert_code.tgz"

# 2. Install (once per worker).
cd_remote="cd $(printf %q "$remote_dir")"
if [[ ${INSTALL:-1} == 1 ]]; then
  echo "tpu_pod: installing on every worker" >&2
  venv="{ [ -x .venv/bin/python ] || python3 -m venv .venv || { sudo apt-get -qq update && sudo apt-get -qq install -y python3-venv && python3 -m venv .venv; }; }"
  on_all_workers "$cd_remote && $venv && .venv/bin/pip install -q --upgrade pip && .venv/bin/pip install -q -e '.[tpu]'"
fi

# 3. Run on every worker at once, each with its own log.
args=$(printf '%q ' "$@")
run="mkdir -p logs && log=logs/\$(hostname).log && "
run+="{ if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi; } && "
if [[ ${DETACH:-0} == 1 ]]; then
  run+="nohup \$py -m sharedbert.main $args > \$log 2>&1 < /dev/null & echo \"\$(hostname): started, log in ~/$remote_dir/\$log\""
else
  run+="\$py -m sharedbert.main $args 2>&1 | tee \$log; exit \${PIPESTATUS[0]}"
fi
echo "tpu_pod: running on every worker: python -m sharedbert.main $args" >&2
on_all_workers "$cd_remote && $run"
if [[ ${DETACH:-0} == 1 ]]; then
  echo "tpu_pod: follow process 0 with: $gcloud compute tpus tpu-vm ssh $TPU_NAME ${where[*]}" \
    "--worker=0 --command='tail -f $remote_dir/logs/*.log'" >&2
fi
