# source "${SLURM_SUBMIT_DIR}/slurm/launch.sh"      (from slurm/sft.sh, slurm/grpo.sh, slurm/eval.sh)
# shellcheck shell=bash
#
# The part the sbatch scripts share: derive the multi-node launch from the Slurm environment, and run
# the job's single srun step so that Slurm's time-limit warning becomes a checkpoint and a requeue.
# It is sourced from $SLURM_SUBMIT_DIR because sbatch runs a copy of the script from a spool dir, where
# "dirname $0" points elsewhere. It reads no config: every training knob stays a Hydra override.
#
# Exported for the srun step (each node's command expands them, plus its own $SLURM_NODEID):
#   NUM_MACHINES   nodes of the job ($SLURM_NNODES)
#   GPUS_PER_NODE  $GPUS_PER_NODE if set, else $SLURM_GPUS_ON_NODE, else $SLURM_GPUS_PER_NODE
#                  ("4", "gpu:4", "a100:4" or "gpu:4(x2)" all give 4), else 1
#   NUM_PROCESSES  NUM_MACHINES x GPUS_PER_NODE (one training process per GPU)
#   MAIN_ADDR      first host of $SLURM_JOB_NODELIST (rank 0 of the rendezvous)
#   MAIN_PORT      $MAIN_PORT if set, else 20000 + job id mod 20000 (a requeued job keeps its id)
#
# Pre-emption and requeue (the scripts ask for "--requeue --signal=B:USR1@120"):
#   1. 120 s before the time limit Slurm sends USR1 to this batch shell only ("B:").
#   2. The trap forwards it to the job's steps with "scancel --signal=USR1 $SLURM_JOB_ID", which
#      signals every process of the srun step on every node, and notes that a requeue is due.
#   3. On each node the launcher ignores USR1 (the node command runs "trap '' USR1" before exec:
#      torch's elastic launcher underneath "accelerate launch" has no handler for it, and the default
#      action would kill it and its workers mid-step). The workers inherit the ignore, but the trainer
#      installs its own handler (train.trainer.PreemptionCallback, train.grpo_trainer.GRPOLoop), so
#      each worker saves a complete checkpoint and exits with the requeue status 75.
#   4. The launcher then exits non-zero (it reports failed workers, not their status), so the decision
#      is made here: once srun has ended, if USR1 came or the step exited 75, "scontrol requeue".
#   5. The requeued job has the same job id and the same command line: the same run dir (from the
#      user's overrides) and train.resume=auto / grpo.resume=auto resume from the newest COMPLETE
#      checkpoint, and WANDB_RUN_ID (slurm-<job id> unless set) with WANDB_RESUME=allow continues
#      the same W&B run.
#   The batch shell waits for srun in the background ("wait" returns when a trapped signal arrives),
#   since bash runs a trap only after the foreground command ends. SIGTERM (scancel, pre-emption by
#   a higher-priority job) is trapped too so the shell keeps waiting while the workers save; the
#   requeue after a pre-emption is Slurm's own (PreemptMode=REQUEUE), after scancel there is none.
#   MAX_REQUEUES (default 20) bounds the requeues of one job ($SLURM_RESTART_COUNT).

: "${SLURM_JOB_ID:?not inside a Slurm job: submit with sbatch (see the first line of the script)}"

REQUEUE_EXIT_CODE=75 # train.requeue_exit_code / grpo.requeue_exit_code
PREEMPTED=0
TERMINATING=0

export NUM_MACHINES="${SLURM_NNODES:-1}"
GPUS_PER_NODE="${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-${SLURM_GPUS_PER_NODE:-1}}}"
GPUS_PER_NODE="${GPUS_PER_NODE%%(*}" # "gpu:4(x2)" -> "gpu:4"
GPUS_PER_NODE="${GPUS_PER_NODE##*:}" # "gpu:a100:4" -> "4"
if [[ ! $GPUS_PER_NODE =~ ^[0-9]+$ ]]; then
  echo "launch: cannot read a GPU count from '$GPUS_PER_NODE'; set GPUS_PER_NODE" >&2
  exit 2
fi
export GPUS_PER_NODE
export NUM_PROCESSES=$((NUM_MACHINES * GPUS_PER_NODE))

mapfile -t JOB_HOSTS < <(scontrol show hostnames "${SLURM_JOB_NODELIST:-$(hostname)}")
if ((${#JOB_HOSTS[@]} == 0)); then
  echo "launch: scontrol listed no hosts for '${SLURM_JOB_NODELIST:-}'" >&2
  exit 2
fi
export MAIN_ADDR="${JOB_HOSTS[0]}"
export MAIN_PORT="${MAIN_PORT:-$((20000 + SLURM_JOB_ID % 20000))}"

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
