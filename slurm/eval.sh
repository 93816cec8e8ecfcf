#!/bin/bash
# sbatch --partition="$PARTITION" --account="$ACCOUNT" slurm/eval.sh checkpoint=runs/sft_4b/checkpoint-500 benchmark=p3i data=mix_p3i data.dir=/data/mix_p3i split=val logger=wandb
#   sbatch --nodes=2 --gpus-per-node=8 slurm/eval.sh checkpoint=... benchmark=egoserve ...   (16 ranks)
#   EVAL_MODULE=eval.watch sbatch slurm/eval.sh run_dir=runs/sft_4b benchmark=p3i data=mix_p3i data.dir=/data/mix_p3i
#       (the watcher: evaluates every new complete checkpoint of a training run once, beside the training)
#   sbatch --cpus-per-task=2 --time=00:30:00 slurm/eval.sh checkpoint=runs/toy_sft/final data=toy   (smoke test, a small node)
#
# Causal streaming evaluation: one "accelerate launch" per node (conf/accelerate/ddp.yaml, or
# $ACCELERATE_CONFIG), one eval.run process per GPU, Hydra overrides of conf/eval.yaml passed through
# unchanged. The ranks split the records and rank 0 merges and scores (eval/ranks.py); one node of
# one GPU is one plain process. Evaluation is resumable (one predictions shard per rank), so the
# time-limit warning (USR1, forwarded to the step by slurm/launch.sh) simply ends the processes and
# the job is requeued to finish the remaining records. EVAL_MODULE=eval.watch runs the watcher, one
# process on one node (give it launch=accelerate num_processes=N to evaluate on N GPUs).
# Partition, account and time come from your sbatch flags or SBATCH_* variables. Submit from the
# repository root.
#SBATCH --job-name=eval
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --time=04:00:00
#SBATCH --requeue
#SBATCH --signal=B:USR1@120
#SBATCH --open-mode=append
#SBATCH --output=slurm-%x-%j.log
set -euo pipefail
MODULE="${EVAL_MODULE:-eval.run}"
if [[ $MODULE == eval.watch ]]; then
  LAUNCHER_COMMAND=python # the watcher is one process; it launches each evaluation itself
fi
[[ -f "${SLURM_SUBMIT_DIR:-.}/slurm/launch.sh" ]] || { echo "slurm/eval.sh: no slurm/launch.sh under ${SLURM_SUBMIT_DIR:-$PWD}: submit from the repository root" >&2; exit 2; }
# shellcheck source=launch.sh source-path=SCRIPTDIR
source "${SLURM_SUBMIT_DIR:-.}/slurm/launch.sh"

if [[ $MODULE == eval.watch ]]; then
  if ((NUM_MACHINES > 1)); then
    echo "eval.sh: EVAL_MODULE=eval.watch runs on one node (got $NUM_MACHINES): submit it with --nodes=1" >&2
    exit 2
  fi
  STEP=(--ntasks=1 --kill-on-bad-exit=1 --label python -m eval.watch)
else
  # As slurm/sft.sh (through train.launch): each node expands its own $SLURM_NODEID; the launcher ignores USR1, eval.run
  # restores its default action (the process ends and resumes after the requeue).
  # shellcheck disable=SC2016
  STEP=(--ntasks-per-node=1 --kill-on-bad-exit=1 --label bash -c 'trap "" USR1; exec python -m train.launch --config_file "${ACCELERATE_CONFIG:-conf/accelerate/ddp.yaml}" --num_machines "$NUM_MACHINES" --num_processes "$NUM_PROCESSES" --machine_rank "$SLURM_NODEID" --main_process_ip "$MAIN_ADDR" --main_process_port "$MAIN_PORT" -m "$0" "$@"' "$MODULE")
fi
run_step srun "${STEP[@]}" "$@"
