# source "${SLURM_SUBMIT_DIR}/slurm/launch.sh"      (from slurm/sft.sh, slurm/grpo.sh, slurm/eval.sh)
# shellcheck shell=bash
#
# The part the sbatch scripts share: derive the multi-node launch from the Slurm environment, and run
# the job's single srun step so that Slurm's time-limit warning becomes a checkpoint and a requeue.
# It is sourced from $SLURM_SUBMIT_DIR because sbatch runs a copy of the script from a spool dir, where
# "dirname $0" points elsewhere. It reads no config: every training knob stays a Hydra override.
#
# The environment: the project's Python is activated here, so a job needs no "source ..." of its own:
#   CONDA_ENV=name (a conda env), else VENV=/path/to/venv, else the repository's own .venv (what
#   "make setup" creates); a job whose PATH then has no "accelerate" stops at once with that message.
#
# Exported for the srun step (each node's command expands them, plus its own $SLURM_NODEID):
#   NUM_MACHINES   nodes of the job ($SLURM_NNODES)
#   GPUS_PER_NODE  $GPUS_PER_NODE if set, else the first of $SLURM_GPUS_ON_NODE, $SLURM_GPUS_PER_NODE
#                  ("4", "gpu:4", "a100:4" or "gpu:4(x2)" all give 4), $SLURM_JOB_GPUS (a list of GPU
#                  indices), the job's gres from "scontrol show job" (sbatch --gres=gpu:8, which sets
#                  no SLURM_GPUS_* variable), $CUDA_VISIBLE_DEVICES; none of them: the job stops
#                  (a silent 1 would start one process on an 8-GPU node)
#   NUM_PROCESSES  NUM_MACHINES x GPUS_PER_NODE (one training process per GPU)
#   MAIN_ADDR      first host of $SLURM_JOB_NODELIST (rank 0 of the rendezvous): its NodeAddr from
#                  "scontrol show node", else its name
#   MAIN_PORT      $MAIN_PORT if set, else 20000 + job id mod 20000 (a requeued job keeps its id)
#                  (each node's "accelerate launch" joins one torch rendezvous at MAIN_ADDR:MAIN_PORT, as
#                  machine $SLURM_NODEID of NUM_MACHINES; nothing writes the environment to disk)
#   NCCL / torch   NCCL_DEBUG=WARN, TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (a failed collective ends the job
#                  instead of hanging it), OMP_NUM_THREADS = CPUs per task / GPUs; each overridable by
#                  setting it before sbatch
# Output: srun --label prefixes every line with its node; the training entry points prefix their log
# lines with "rank R/W", so the ranks of one node stay apart in the one log file.
#
# Pre-emption and requeue (the scripts ask for "--requeue --signal=B:USR1@120"):
#   1. 120 s before the time limit Slurm sends USR1 to this batch shell only ("B:").
#   2. The trap forwards it to the job's steps with "scancel --signal=USR1 $SLURM_JOB_ID", which
#      signals every process of the srun step on every node, and notes that a requeue is due.
#   3. On each node the launcher ignores USR1 (the node command runs "trap '' USR1" before exec:
#      torch's elastic launcher underneath "accelerate launch" has no handler for it, and the default
#      action would kill it and its workers mid-step). The workers inherit the ignore, but the trainer
#      installs its own handler (infra.run_control.RunControl, in train.sft and train.grpo), so
#      each worker saves a complete checkpoint and exits with the requeue status 75.
#   4. The launcher (python -m train.launch: accelerate launch) then prints one line and exits 75 when
#      every rank did (torch's own report of "failed" ranks would be a ~40-line traceback); the
#      decision is made here: once srun has ended, if USR1 came or the step exited 75, "scontrol requeue".
#   5. The requeued job has the same job id and the same command line: the same run dir (from the
#      user's overrides) and sft.resume=auto / grpo.resume=auto resume from the newest COMPLETE
#      checkpoint, and WANDB_RUN_ID (slurm-<job id> unless set) with WANDB_RESUME=allow continues
#      the same W&B run.
#   The batch shell waits for srun in the background ("wait" returns when a trapped signal arrives),
#   since bash runs a trap only after the foreground command ends. SIGTERM (scancel, pre-emption by
#   a higher-priority job) is trapped too so the shell keeps waiting while the workers save; the
#   requeue after a pre-emption is Slurm's own (PreemptMode=REQUEUE), after scancel there is none.
#   MAX_REQUEUES (default 20) bounds the requeues of one job ($SLURM_RESTART_COUNT).

: "${SLURM_JOB_ID:?not inside a Slurm job: submit with sbatch (see the first line of the script)}"

REQUEUE_EXIT_CODE=75 # sft.requeue_exit_code / grpo.requeue_exit_code
PREEMPTED=0
TERMINATING=0

activate_env() {
  if [[ -n ${CONDA_ENV:-} ]]; then
    # shellcheck disable=SC1091
    source "$(conda info --base)/etc/profile.d/conda.sh" && conda activate "$CONDA_ENV"
  elif [[ -n ${VENV:-} ]]; then
    # shellcheck disable=SC1091
    source "$VENV/bin/activate"
  elif [[ -f "${SLURM_SUBMIT_DIR:-.}/.venv/bin/activate" ]]; then
    # shellcheck disable=SC1091
    source "${SLURM_SUBMIT_DIR:-.}/.venv/bin/activate"
  fi
  if ! command -v "${LAUNCHER_COMMAND:-accelerate}" >/dev/null; then
    echo "launch: '${LAUNCHER_COMMAND:-accelerate}' not found: run 'make setup' in the repository (it makes .venv), or set VENV=/path/to/venv or CONDA_ENV=name" >&2
    exit 2
  fi
}
activate_env

# gpu_count VALUE: the GPU count in one of Slurm's spellings ("4", "gpu:4", "gpu:a100:4(x2)"), or nothing.
gpu_count() {
  local v="${1%%(*}"
  v="${v##*:}"
  [[ $v =~ ^[0-9]+$ ]] && echo "$v"
}

find_gpus_per_node() {
  local n
  for v in "${GPUS_PER_NODE:-}" "${SLURM_GPUS_ON_NODE:-}" "${SLURM_GPUS_PER_NODE:-}"; do
    n="$(gpu_count "$v")" && { echo "$n"; return; }
  done
  if [[ -n ${SLURM_JOB_GPUS:-} ]]; then
    tr ',' '\n' <<<"$SLURM_JOB_GPUS" | grep -c .
    return
  fi
  local tres
  tres="$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | tr ' ' '\n' | grep -m1 -E '^(TresPerNode|Gres)=.*gpu' || true)"
  if [[ -n $tres ]]; then
    n="$(gpu_count "${tres#*=}")" && { echo "$n"; return; }
  fi
  if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
    tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .
    return
  fi
  return 1
}

export NUM_MACHINES="${SLURM_NNODES:-1}"
if ! GPUS_PER_NODE="$(find_gpus_per_node)"; then
  echo "launch: cannot tell how many GPUs each node has (no SLURM_GPUS_ON_NODE, SLURM_GPUS_PER_NODE, SLURM_JOB_GPUS, gres in 'scontrol show job' or CUDA_VISIBLE_DEVICES): ask sbatch for GPUs (--gpus-per-node=N, --gres=gpu:N or --gpus=N: the headers ask for none; slurm/submit.sh refuses such a job before it queues) or set GPUS_PER_NODE=N" >&2
  exit 2
fi
export GPUS_PER_NODE
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
export TORCH_NCCL_ASYNC_ERROR_HANDLING="${TORCH_NCCL_ASYNC_ERROR_HANDLING:-1}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( ${SLURM_CPUS_PER_TASK:-$GPUS_PER_NODE} / (GPUS_PER_NODE > 0 ? GPUS_PER_NODE : 1) ))}"
export NUM_PROCESSES=$((NUM_MACHINES * GPUS_PER_NODE))

mapfile -t JOB_HOSTS < <(scontrol show hostnames "${SLURM_JOB_NODELIST:-$(hostname)}")
if ((${#JOB_HOSTS[@]} == 0)); then
  echo "launch: scontrol listed no hosts for '${SLURM_JOB_NODELIST:-}'" >&2
  exit 2
fi
# The head's address: its NodeAddr in "scontrol show node" (a node's name need not resolve), else its name.
MAIN_ADDR="$(scontrol show node "${JOB_HOSTS[0]}" 2>/dev/null | tr ' ' '\n' | sed -n 's/^NodeAddr=//p' | head -n 1 || true)"
export MAIN_ADDR="${MAIN_ADDR:-${JOB_HOSTS[0]}}"
export MAIN_PORT="${MAIN_PORT:-$((20000 + SLURM_JOB_ID % 20000))}"

# The step asks for the GPUs the job holds on each node, whichever way sbatch was asked (--gpus-per-node,
# --gres=gpu:N, --gpus=N): srun reads SLURM_GPUS_PER_NODE as its own --gpus-per-node, and a value left
# from another spelling ("Step requested gres_per_node=gpu:8 is more than the job's gpu:2") fails it.
if [[ -n ${SLURM_GPUS_ON_NODE:-} ]]; then
  export SLURM_GPUS_PER_NODE="$SLURM_GPUS_ON_NODE"
fi

# srun does not inherit sbatch's --cpus-per-task (Slurm >= 22.05) unless told through the environment.
if [[ -n ${SLURM_CPUS_PER_TASK:-} ]]; then
  export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"
fi

# A training job keeps one W&B run across requeues (eval.sh does not call this: one run per evaluation).
pin_wandb_run() {
  export WANDB_RUN_ID="${WANDB_RUN_ID:-slurm-${SLURM_JOB_ID}}"
  export WANDB_RESUME="${WANDB_RESUME:-allow}"
}

on_time_limit_warning() {
  if ((PREEMPTED)); then
    return
  fi
  PREEMPTED=1
  echo "launch: USR1 (time limit near): asking the step to checkpoint, then requeueing" >&2
  scancel --signal=USR1 "$SLURM_JOB_ID" || echo "launch: scancel --signal=USR1 failed" >&2
}

on_terminate() {
  TERMINATING=1
  echo "launch: SIGTERM: waiting for the step to save and exit" >&2
}

# run_step CMD...: run the job's srun step, wait for it through signals, requeue if it was pre-empted.
run_step() {
  echo "launch: job $SLURM_JOB_ID restart ${SLURM_RESTART_COUNT:-0}: $NUM_MACHINES machine(s) x $GPUS_PER_NODE GPU(s), head $MAIN_ADDR:$MAIN_PORT" >&2
  trap on_time_limit_warning USR1
  trap on_terminate TERM
  "$@" &
  local step=$! status=0
  while kill -0 "$step" 2>/dev/null; do
    wait "$step" || true # returns early when a trapped signal arrives; loop until the step is gone
  done
  wait "$step" || status=$? # bash keeps the status of a reaped background job
  if ((PREEMPTED || status == REQUEUE_EXIT_CODE)) && ((!TERMINATING)); then
    if ((${SLURM_RESTART_COUNT:-0} >= ${MAX_REQUEUES:-20})); then
      echo "launch: requeued ${SLURM_RESTART_COUNT:-0} times already (MAX_REQUEUES); not requeueing" >&2
      return "$REQUEUE_EXIT_CODE"
    fi
    echo "launch: step ended with status $status after a checkpoint request: requeueing job $SLURM_JOB_ID" >&2
    scontrol requeue "$SLURM_JOB_ID"
    return 0
  fi
  return "$status"
}
