#!/bin/bash
# sbatch --nodes=1 --gpus-per-node=8 --partition="$PARTITION" --account="$ACCOUNT" slurm/grpo.sh experiment=p3i_4b_grpo init=runs/p3i_4b_sft/final data.dir=/data/p3i_rl logger=wandb
#   sbatch --nodes=2 --gpus-per-node=8 slurm/grpo.sh experiment=p3i_4b_grpo init=runs/p3i_4b_sft/final data.dir=/data/p3i_rl    (2 x 8 GPUs)
#   ACCELERATE_CONFIG=conf/accelerate/zero3.yaml sbatch --gpus=8 slurm/grpo.sh model=qwen3_vl_8b init=...              (ZeRO-3)
#   sbatch --gres=gpu:8 --time=02:00:00 slurm/grpo.sh init=runs/sft_4b/final reward.reward_weights.prs=2 run_name=grpo_prs2
#   python -m train.grpo -m hydra/launcher=slurm reward.reward_weights.prs=1,2,4 init=...    (a sweep: one job per point)
#   sbatch --gpus=1 --cpus-per-task=2 --time=01:00:00 slurm/grpo.sh experiment=toy_grpo init=runs/toy_sft/final data.dir=data/toy   (smoke test, a small node)
#
# GRPO on Slurm, launched like slurm/sft.sh: one "accelerate launch" per node (DeepSpeed ZeRO-2 by
# default, conf/accelerate/zero2.yaml), one process per GPU; each process rolls out its share of every
# update's windows and the gradients are averaged over all of them (train.grpo.parallel, docs/grpo.md).
# Arguments are Hydra overrides of conf/grpo.yaml, passed through unchanged. Time-limit warning ->
# every rank saves its part of a checkpoint -> exit 75 -> requeue -> grpo.resume=auto (slurm/launch.sh);
# resume with the same node and GPU count. Partition, account, node count and time come from your
# sbatch flags or SBATCH_* variables; GPUs too (the header asks for none: --gpus-per-node=N,
# --gres=gpu:N or --gpus=N), and --cpus-per-task below 32 on a smaller node. Submit from the
# repository root.
#SBATCH --job-name=grpo
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=32
#SBATCH --time=24:00:00
#SBATCH --requeue
#SBATCH --signal=B:USR1@120
#SBATCH --open-mode=append
#SBATCH --output=slurm-%x-%j.log
set -euo pipefail
[[ -f "${SLURM_SUBMIT_DIR:-.}/slurm/launch.sh" ]] || { echo "slurm/grpo.sh: no slurm/launch.sh under ${SLURM_SUBMIT_DIR:-$PWD}: submit from the repository root" >&2; exit 2; }
# shellcheck source=launch.sh source-path=SCRIPTDIR
source "${SLURM_SUBMIT_DIR:-.}/slurm/launch.sh"
pin_wandb_run

# The single quotes are deliberate: each node expands its own $SLURM_NODEID inside the step.
# --deepspeed_multinode_launcher standard, whatever ACCELERATE_CONFIG says: the nodes join one torch
# rendezvous (DeepSpeed's own runners would start a separate world per node and write the whole
# environment, API keys included, to .deepspeed_env).
# shellcheck disable=SC2016
run_step srun --ntasks-per-node=1 --kill-on-bad-exit=1 --label bash -c 'trap "" USR1; exec python -m train.launch --config_file "${ACCELERATE_CONFIG:-conf/accelerate/zero2.yaml}" --num_machines "$NUM_MACHINES" --num_processes "$NUM_PROCESSES" --machine_rank "$SLURM_NODEID" --main_process_ip "$MAIN_ADDR" --main_process_port "$MAIN_PORT" --deepspeed_multinode_launcher standard -m train.grpo "$@"' node "$@"
