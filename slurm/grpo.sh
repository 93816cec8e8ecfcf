#!/bin/bash
# sbatch --gpus-per-node=1 --partition="$PARTITION" --account="$ACCOUNT" slurm/grpo.sh init=runs/sft_4b/final model=qwen3_vl_4b data=mix_p3i data.dir=/data/mix_p3i run_name=grpo_4b logger=wandb
#   sbatch --time=02:00:00 slurm/grpo.sh init=runs/sft_4b/final reward.reward_weights.prs=2 run_name=grpo_prs2
#   python -m train.grpo -m hydra/launcher=slurm reward.reward_weights.prs=1,2,4 init=...    (a sweep: one job per point)
#
# GRPO on Slurm, launched like slurm/sft.sh: one "accelerate launch" per node, one process per GPU,
# Hydra overrides of conf/grpo.yaml passed through unchanged. The GRPO loop (train.grpo_trainer) is
# single-process today, hence one GPU on one node in the header: asking for more GPUs starts that many
# independent copies writing one run dir. Plain data parallel (conf/accelerate/ddp.yaml): the loop does
# not use DeepSpeed. Time-limit warning -> checkpoint -> requeue -> grpo.resume=auto (slurm/launch.sh).
# Partition, account and time come from your sbatch flags or SBATCH_* variables. Submit from the
# repository root.
#SBATCH --job-name=grpo
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
#SBATCH --cpus-per-task=16
#SBATCH --time=24:00:00
#SBATCH --requeue
#SBATCH --signal=B:USR1@120
#SBATCH --open-mode=append
#SBATCH --output=slurm-%x-%j.log
set -euo pipefail
# shellcheck source=launch.sh source-path=SCRIPTDIR
source "${SLURM_SUBMIT_DIR:-.}/slurm/launch.sh"
pin_wandb_run

# The single quotes are deliberate: each node expands its own $SLURM_NODEID inside the step.
# shellcheck disable=SC2016
run_step srun --ntasks-per-node=1 --kill-on-bad-exit=1 --label bash -c 'trap "" USR1; exec accelerate launch --config_file "${ACCELERATE_CONFIG:-conf/accelerate/ddp.yaml}" --num_machines "$NUM_MACHINES" --num_processes "$NUM_PROCESSES" --machine_rank "$SLURM_NODEID" --main_process_ip "$MAIN_ADDR" --main_process_port "$MAIN_PORT" -m train.grpo "$@"' node "$@"
