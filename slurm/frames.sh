#!/bin/bash
# sbatch --array=0-7 --partition="$PARTITION" --account="$ACCOUNT" slurm/frames.sh model=qwen3_vl_4b data=mix_p3i data.dir=/data/mix_p3i
#   sbatch --array=0-3 slurm/frames.sh records=/data/built/nexar model=qwen3_vl_4b workers=32      (one build dir)
#
# The frames stage over many nodes: each task of the Slurm array decodes its shard of the clips into
# the one shared frame cache (paths.frame_cache_dir, on a file system every node mounts at the same
# path): task i of an array of n runs "python -m data_builders frames ... shard=i/n" (i counts from the
# array's first index, n is SLURM_ARRAY_TASK_COUNT), with workers = the task's CPUs unless an override
# says otherwise. Arguments are Hydra overrides of conf/frames.yaml, passed through unchanged; give the
# training run's render (its model group's: model=qwen3_vl_4b gives render=hd). Entries are renamed into place only once whole, so
# the tasks never cut each other's entries; a task that dies (or is pre-empted and requeued) decodes
# on its rerun only the clips it had not finished, and a resubmitted array skips every cached clip.
# Partition, account and time come from your sbatch flags or SBATCH_* variables. Submit from the
# repository root. No GPU: decoding runs on the CPUs.
#SBATCH --job-name=frames
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=32
#SBATCH --time=12:00:00
#SBATCH --requeue
#SBATCH --signal=B:USR1@120
#SBATCH --open-mode=append
#SBATCH --output=slurm-%x-%A_%a.log
set -euo pipefail
LAUNCHER_COMMAND=python # one Python process per task, decoding with its own worker processes
GPUS_PER_NODE="${GPUS_PER_NODE:-0}"
: "${SLURM_ARRAY_TASK_ID:?not an array job: submit with sbatch --array=0-N (N+1 shards)}"
: "${SLURM_ARRAY_TASK_COUNT:?not an array job: submit with sbatch --array=0-N (N+1 shards)}"
first="${SLURM_ARRAY_TASK_MIN:-0}"
last="${SLURM_ARRAY_TASK_MAX:-$((first + SLURM_ARRAY_TASK_COUNT - 1))}"
if ((last - first + 1 != SLURM_ARRAY_TASK_COUNT)); then
  echo "frames: the array must be one contiguous range (--array=0-N, no step or list): got $SLURM_ARRAY_TASK_COUNT tasks from $first to $last" >&2
  exit 2
fi
SHARD="$((SLURM_ARRAY_TASK_ID - first))/$SLURM_ARRAY_TASK_COUNT"
[[ -f "${SLURM_SUBMIT_DIR:-.}/slurm/launch.sh" ]] || { echo "slurm/frames.sh: no slurm/launch.sh under ${SLURM_SUBMIT_DIR:-$PWD}: submit from the repository root" >&2; exit 2; }
# shellcheck source=launch.sh source-path=SCRIPTDIR
source "${SLURM_SUBMIT_DIR:-.}/slurm/launch.sh"

echo "frames: array task $SLURM_ARRAY_TASK_ID: shard=$SHARD" >&2
run_step srun --ntasks=1 --kill-on-bad-exit=1 --label python -m data_builders frames "workers=${SLURM_CPUS_PER_TASK:-4}" "$@" "shard=$SHARD"
