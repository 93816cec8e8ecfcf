"""``accelerate launch`` for the sbatch scripts, with a pre-emption that reads as one.

    python -m train.launch --config_file conf/accelerate/zero2.yaml --num_machines 2 --num_processes 16 \\
        --machine_rank 0 --main_process_ip gpu-07 --main_process_port 24242 -m train.sft OVERRIDES...

The node command of ``slurm/sft.sh`` and ``slurm/grpo.sh``: the arguments are ``accelerate launch``'s,
run in this process by accelerate's own command line. One thing differs. On a pre-emption every rank
saves its checkpoint, says so in one line (``preempted: saved <run>/checkpoint-N; exit 75 to be
requeued``) and exits with the requeue status; torch's launcher under accelerate then reports each
rank as failed and raises, printing a ~40-line traceback that reads like a crash. Here, when the first
rank to end exited with :data:`infra.run_control.REQUEUE_EXIT_CODE` and the others did too or were
stopped by torch's launcher on that (SIGTERM), that report (the traceback and torch's per-rank
error line) becomes one line and this process exits with the requeue status, which
``slurm/launch.sh`` turns into a requeue. Any other failure keeps accelerate's whole report.
"""

from __future__ import annotations

import logging
import signal
import sys

from infra.run_control import REQUEUE_EXIT_CODE

#: The logger of torch's worker supervision, which logs one error line per failed rank.
WORKER_LOG = "torch.distributed.elastic.multiprocessing.api"


class _DropRequeueExits(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return f"(exitcode: {REQUEUE_EXIT_CODE})" not in record.getMessage()


def preempted(exc: Exception) -> bool:
    """Whether a launcher's ``ChildFailedError`` is a pre-emption: the first rank to end exited with
    the requeue status, and every other one did too or was stopped by the launcher (SIGTERM, which
    torch sends the ranks still running once one has ended)."""
    _, first = exc.get_first_failure()
    codes = {f.exitcode for f in exc.failures.values()}
    return first.exitcode == REQUEUE_EXIT_CODE and codes <= {REQUEUE_EXIT_CODE, -signal.SIGTERM}


def main(argv: list[str] | None = None) -> None:
    from accelerate.commands.accelerate_cli import main as accelerate
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    logging.getLogger(WORKER_LOG).addFilter(_DropRequeueExits())
    sys.argv = ["accelerate", "launch", *(sys.argv[1:] if argv is None else argv)]
    try:
        accelerate()
    except ChildFailedError as exc:
        if not preempted(exc):
            raise
        print(
            f"launch: pre-empted: {len(exc.failures)} rank(s) of {exc.name} saved a checkpoint and exited "
            f"{REQUEUE_EXIT_CODE}; the job is requeued",
            file=sys.stderr,
        )
        sys.exit(REQUEUE_EXIT_CODE)


if __name__ == "__main__":
    main()
