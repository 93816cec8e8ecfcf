#!/bin/bash
# sbatch --nodes=2 --gpus-per-node=8 --partition="$PARTITION" --account="$ACCOUNT" slurm/sft.sh experiment=p3i_4b_sft data.dir=/data/mix_p3i run_name=sft_4b logger=wandb
#   ACCELERATE_CONFIG=conf/accelerate/zero3.yaml sbatch --nodes=4 --gpus-per-node=8 slurm/sft.sh model=qwen3_vl_8b ...   (ZeRO-3)
#   sbatch --gpus=1 --cpus-per-task=2 --time=01:00:00 slurm/sft.sh experiment=toy_sft data.dir=data/toy   (smoke test, a small node)
#
# SFT on Slurm: one "accelerate launch" per node (DeepSpeed ZeRO-2 by default), one process per GPU.
# Arguments are Hydra overrides of conf/sft.yaml and reach "python -m train.sft" unchanged. Partition,
# account, node count and time come from your sbatch flags (they override the header below) or from
# SBATCH_* environment variables; paths come from overrides (paths.root_dir=..., data.dir=...). The
# header asks for no GPUs: give --gpus-per-node=N, --gres=gpu:N or --gpus=N (one node), and lower
# --cpus-per-task on a node with fewer than 32 CPUs (slurm/submit.sh refuses a job no node can hold).
# Submit from the repository root: the job runs there and sources slurm/launch.sh from it. Slurm's
# time-limit warning becomes a checkpoint and a requeue into the same run dir with sft.resume=auto,
# and the same W&B run (see slurm/launch.sh). Keep run_name fixed across submissions to resume.
#SBATCH --job-name=sft
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=32
#SBATCH --time=24:00:00
#SBATCH --requeue
#SBATCH --signal=B:USR1@120
#SBATCH --open-mode=append
#SBATCH --output=slurm-%x-%j.log
set -euo pipefail
[[ -f "${SLURM_SUBMIT_DIR:-.}/slurm/launch.sh" ]] || { echo "slurm/sft.sh: no slurm/launch.sh under ${SLURM_SUBMIT_DIR:-$PWD}: submit from the repository root" >&2; exit 2; }
# shellcheck source=launch.sh source-path=SCRIPTDIR
source "${SLURM_SUBMIT_DIR:-.}/slurm/launch.sh"
pin_wandb_run

# The single quotes are deliberate: each node expands its own $SLURM_NODEID inside the step.
# --deepspeed_multinode_launcher standard, whatever ACCELERATE_CONFIG says: the nodes join one torch
# rendezvous (DeepSpeed's own runners would start a separate world per node and write the whole
# environment, API keys included, to .deepspeed_env).
# shellcheck disable=SC2016
run_step srun --ntasks-per-node=1 --kill-on-bad-exit=1 --label bash -c 'trap "" USR1; exec python -m train.launch --config_file "${ACCELERATE_CONFIG:-conf/accelerate/zero2.yaml}" --num_machines "$NUM_MACHINES" --num_processes "$NUM_PROCESSES" --machine_rank "$SLURM_NODEID" --main_process_ip "$MAIN_ADDR" --main_process_port "$MAIN_PORT" --deepspeed_multinode_launcher standard -m train.sft "$@"' node "$@"
