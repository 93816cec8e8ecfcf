"""slurm/frames.sh under a fake Slurm array job: task i of an array of n runs one frames stage with
``shard=i/n`` (counted from the array's first index), the user's overrides passed through untouched,
and refuses to run outside an array or over an array with gaps."""

from __future__ import annotations

ARGS = ["data=mix_p3i", "data.dir=/data/set $1", "render=hd", "+note=$(touch pwned)", "*", ""]


def run(cluster, **env: str) -> tuple[object, int, str]:
    c = cluster(SLURM_NNODES="1", SLURM_JOB_NUM_NODES="1", SLURM_JOB_NODELIST="cpu-01", **env)
    proc = c.sbatch("frames.sh", *ARGS)
    out, _ = proc.communicate(timeout=30)
    return c, proc.returncode, out


def array(task: int, first: int, last: int, count: int | None = None) -> dict[str, str]:
    n = last - first + 1 if count is None else count
    return {
        "SLURM_ARRAY_TASK_ID": str(task),
        "SLURM_ARRAY_TASK_MIN": str(first),
        "SLURM_ARRAY_TASK_MAX": str(last),
        "SLURM_ARRAY_TASK_COUNT": str(n),
    }


def test_each_array_task_runs_its_shard_with_the_arguments(cluster):
    for task, first, last, shard in [(0, 0, 3, "0/4"), (3, 0, 3, "3/4"), (5, 4, 7, "1/4")]:
        c, rc, out = run(cluster, **array(task, first, last))
        assert rc == 0, out
        want = ["-m", "data_builders", "frames", "workers=32", *ARGS, f"shard={shard}"]
        assert c.args("python.0") == want
        assert c.args("srun") == ["--ntasks=1", "--kill-on-bad-exit=1", "--label", "python", *want]
        assert f"frames: array task {task}: shard={shard}" in out


def test_outside_an_array_or_over_one_with_gaps_the_script_refuses(cluster):
    c, rc, out = run(cluster)
    assert rc != 0 and "not an array job: submit with sbatch --array=0-N" in out
    assert not (c.log / "python.0.args").exists()
    c, rc, out = run(cluster, **array(2, 0, 6, count=4))  # --array=0-6:2
    assert rc == 2 and "the array must be one contiguous range (--array=0-N, no step or list)" in out
    assert not (c.log / "python.0.args").exists()


def test_a_preempted_task_is_requeued(cluster):
    c, rc, out = run(cluster, FAKE_MODE="exit75", **array(1, 0, 1))
    assert rc == 0, out
    assert c.calls("scontrol")[-1] == "requeue 4242"
