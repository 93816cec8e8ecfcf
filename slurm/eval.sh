#!/bin/bash
# sbatch --partition="$PARTITION" --account="$ACCOUNT" slurm/eval.sh checkpoint=runs/sft_4b/checkpoint-500 benchmark=p3i data=mix_p3i data.dir=/data/mix_p3i logger=wandb
#   EVAL_MODULE=eval.watch sbatch slurm/eval.sh run_dir=runs/sft_4b benchmark=p3i data=mix_p3i data.dir=/data/mix_p3i
#       (the watcher: evaluates every new complete checkpoint of a training run once, beside the training)
#   sbatch --cpus-per-task=2 --time=00:30:00 slurm/eval.sh checkpoint=runs/toy_sft/final data=toy   (smoke test, a small node)
#
# Causal streaming evaluation on one GPU: "python -m eval.run" (or $EVAL_MODULE) with Hydra overrides
# of conf/eval.yaml passed through unchanged; a single process, so no accelerate launch. Evaluation is
# resumable (predictions.jsonl), so the time-limit warning (USR1, forwarded to the step by
# slurm/launch.sh) simply ends the process and the job is requeued to finish the remaining records.
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
LAUNCHER_COMMAND=python            # one Python process: no accelerate launch, whatever the GPU count
GPUS_PER_NODE="${GPUS_PER_NODE:-1}"
# shellcheck source=launch.sh source-path=SCRIPTDIR
source "${SLURM_SUBMIT_DIR:-.}/slurm/launch.sh"

run_step srun --ntasks=1 --kill-on-bad-exit=1 --label python -m "${EVAL_MODULE:-eval.run}" "$@"
