#!/bin/bash
# slurm/submit.sh --gpus-per-node=8 --cpus-per-task=32 slurm/sft.sh experiment=p3i_4b_sft data.dir=/data/mix_p3i
#   slurm/submit.sh --check --nodes=1 --cpus-per-task=16 --gpus-per-node=1 --wrap=true     (ask only: exit 0 or 2)
#
# sbatch, once Slurm has said the job can ever start: "sbatch --test-only" with the same arguments
# first. A job that no node of the partition can hold (more CPUs per task, GPUs per node or nodes than
# it has) would otherwise pend for ever without a word (reason PartitionConfig); here it is refused
# before it is submitted, exit 2, with what the job asks (the script's #SBATCH lines, then the
# command line's, which win) beside what the partition's nodes have (sinfo). Any other answer of
# --test-only (a busy cluster: a start time) submits. slurm/sft.sh and slurm/grpo.sh without a GPU
# request (their headers ask for none) are refused before sbatch is asked, exit 2, naming the
# flags; under plain sbatch such a job would queue, then stop in its log. Arguments are exactly sbatch's. The sweep
# launcher (hydra/launcher=slurm: train.hydra_sweeps.SlurmRequestCheck) asks with --check before it
# submits its points.
set -euo pipefail
check_only=0
if [[ ${1:-} == --check ]]; then
  check_only=1
  shift
fi

# asked KEY: the value of sbatch option --KEY in the script's header, overridden by the command line.
asked() {
  local key="$1" value="" arg script="" prev=""
  for arg in "${@:2}"; do
    if [[ -z $script && $arg != -* && $prev != -p && $prev != -A && -f $arg ]]; then script="$arg"; fi
    prev="$arg"
  done
  if [[ -n $script ]]; then
    value="$(sed -n "s/^#SBATCH --$key=\(.*\)/\1/p" "$script" | tail -n 1)"
  fi
  for arg in "${@:2}"; do
    [[ $arg == "$script" ]] && break
    [[ $arg == --$key=* ]] && value="${arg#--"$key"=}"
  done
  echo "$value"
}

# asks_for_gpus ARGS: whether the job asks for GPUs: a --gpus*, -G or --gres=...gpu... before the
# script, SBATCH_GPUS / SBATCH_GPUS_PER_NODE / SBATCH_GRES, or such a line in the script's header.
asks_for_gpus() {
  local arg prev="" script=""
  for arg in "$@"; do
    if [[ $arg != -* && $prev != -p && $prev != -A && $prev != --gres && -f $arg ]]; then script="$arg"; break; fi
    case "$arg" in --gpus* | -G* | --gres=*gpu*) return 0 ;; esac
    [[ $prev == --gres && $arg == *gpu* ]] && return 0
    prev="$arg"
  done
  [[ -n ${SBATCH_GPUS:-}${SBATCH_GPUS_PER_NODE:-}${SBATCH_GRES:-} ]] && return 0
  [[ -n $script ]] && grep -qE '^#SBATCH +(--gpus|-G|--gres=.*gpu)' "$script"
}

# The training scripts leave the GPU request to the command line (a header default would clash with
# the other forms): without one the job would queue, then stop in its log.
for arg in "$@"; do
  if [[ $arg == */sft.sh || $arg == */grpo.sh || $arg == sft.sh || $arg == grpo.sh ]] && ! asks_for_gpus "$@"; then
    echo "submit: $arg asks for no GPU (its header leaves that to the command line): add --gpus-per-node=N (or --gres=gpu:N, or --gpus=N on one node); nothing was submitted" >&2
    exit 2
  fi
done

if ! verdict="$(sbatch --test-only "$@" 2>&1)"; then
  if grep -qiE "node configuration is not available|partition.*(limit|config)|more processors than|exceeds" <<<"$verdict"; then
    request=""
    for key in nodes ntasks-per-node cpus-per-task gpus-per-node gres gpus mem partition; do
      value="$(asked "$key" "$@")"
      [[ -n $value ]] && request+=" --$key=$value"
    done
    partition="$(asked partition "$@")"
    partition="${partition:-${SBATCH_PARTITION:-}}"
    nodes="$(sinfo -h -N ${partition:+-p "$partition"} -o '%N: %c CPUs, gres %G' 2>/dev/null | sort -u | paste -sd ';' || true)"
    echo "submit: Slurm can never start this job: it asks${request:- nothing special}; the nodes of partition ${partition:-(default)}: ${nodes:-none listed} (sbatch --test-only: ${verdict//$'\n'/ }). Lower the request: sbatch flags override the script's header." >&2
    exit 2
  fi
  echo "submit: sbatch --test-only failed: $verdict" >&2
  exit 2
fi
if ((check_only)); then
  exit 0
fi
exec sbatch "$@"
