"""conf/data/mix_p3i.yaml over fixture builds: shares follow the weights, splits share no video."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from data_builders.build import BuildFailed, build_source
from data_builders.mixture import MixtureConfig, SourceShare, apportion, build_mixture, split_of, video_groups
from data_builders.record_io import load_streams
from tests.conftest import read_only_run, run_module

WEIGHTS = {"shot2story": 10000, "llava_video": 2000, "nexar": 600, "ego4d_events": 768}


@pytest.fixture
def built(tmp_path, mp4):
    """Fixture builds of the four mix_p3i sources under tmp_path/built/<source>."""
    videos, ann, root = tmp_path / "videos", tmp_path / "ann", tmp_path / "built"
    ann.mkdir()
    clips = [f"clip{i}" for i in range(8)]
    for c in clips:
        mp4(videos / f"{c}.mp4", 8, fps=25)
    (ann / "s2s.json").write_text(
        json.dumps(
            [
                {
                    "video": f"{c}.mp4",
                    "video_names": [f"{c}_0_49.mp4", f"{c}_50_199.mp4"],
                    "captions": ["A.", "B."],
                }
                for c in clips
            ]
        )
    )
    (ann / "0_30_s_academic_v0_1_cap_processed.json").write_text(
        json.dumps(
            [
                {
                    "id": f"v{i}",
                    "video": f"clip{i}.mp4",
                    "data_source": "0_30_s_academic_v0_1",
                    "conversations": [
                        {"from": "human", "value": "<image>\nDescribe."},
                        {"from": "gpt", "value": "A dog."},
                    ],
                }
                for i in range(4)
            ]
        )
    )
    (ann / "nexar.csv").write_text("file_name,time_of_event,time_of_alert\nclip0.mp4,6.0,5.0\nclip1.mp4,,\n")
    (ann / "narration.json").write_text(
        json.dumps(
            {
                "clip2": {
                    "narration_pass_1": {
                        "narrations": [{"timestamp_sec": 2.0, "narration_text": "#C C opens a tap"}]
                    }
                }
            }
        )
    )
    for source, path in (
        ("shot2story", ann / "s2s.json"),
        ("llava_video", ann / "0_30_s_academic_v0_1_cap_processed.json"),
        ("nexar", ann / "nexar.csv"),
        ("ego4d_events", ann / "narration.json"),
    ):
        build_source(
            source,
            root / source,
            annotations=path,
            videos=videos,
            check_videos=False,
            options={"min_clip": 5.0} if source == "ego4d_events" else None,
        )
    return root


def test_mix_p3i_cli_shares_and_video_disjoint_splits(tmp_path, built):
    out = tmp_path / "mix"
    cmd = [
        sys.executable,
        "-m",
        "data_builders",
        "mix",
        "data=mix_p3i",
        f"data.root={built}",
        f"data.dir={out}",
        "data.total=20",
        "data.splits={train: 0.5, val: 0.5}",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "mixture.json").read_text())
    taken = {k: v["taken"] for k, v in summary["sources"].items()}
    assert taken == {"shot2story": 15, "llava_video": 3, "nexar": 1, "ego4d_events": 1}
    for k, n in taken.items():
        assert abs(n - 20 * WEIGHTS[k] / sum(WEIGHTS.values())) <= 1
    splits = {name: load_streams(out / name / "records.jsonl") for name in ("train", "val")}
    assert sum(len(v) for v in splits.values()) == 20
    assert min(len(v) for v in splits.values()) > 0
    keys = {name: {s.video_key for s in v} for name, v in splits.items()}
    assert not keys["train"] & keys["val"]
    # the fixture sources share clip files (clipN.mp4) under different video keys: still one split per file
    videos = {name: {(out / name / s.video).resolve() for s in v} for name, v in splits.items()}
    assert not videos["train"] & videos["val"] and all(p.is_file() for v in videos.values() for p in v)
    stats = json.loads((out / "train" / "stats.json").read_text())
    assert stats["records"] == len(splits["train"])
    rerun = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0 and json.loads((out / "mixture.json").read_text()) == summary


def test_counts_without_total_and_shortfall_and_duplicates(tmp_path, built):
    cfg = MixtureConfig(
        name="t",
        root=str(built),
        dir=str(tmp_path / "m"),
        seed=3,
        sources={"nexar": SourceShare(count=2), "llava_video": SourceShare(count=None)},
    )
    summary = build_mixture(cfg)
    assert {k: v["taken"] for k, v in summary["sources"].items()} == {"llava_video": 4, "nexar": 2}
    cfg.sources["nexar"] = SourceShare(count=3)
    with pytest.raises(BuildFailed, match="source nexar has 2 records .* asks for 3"):
        build_mixture(cfg)
    cfg.sources = {
        "a": SourceShare(records=str(built / "nexar")),
        "b": SourceShare(records=str(built / "nexar")),
    }
    with pytest.raises(BuildFailed, match="duplicate record id 'nexar-clip0' in sources a and b"):
        build_mixture(cfg)


def test_video_groups_join_shared_keys_and_files():
    from data_builders.records import Stream

    def s(i, video, key):
        return Stream(
            id=i,
            source="x",
            task="timed_qa",
            video=video,
            clip_start=0,
            clip_end=1,
            instruction="",
            meta={"video_id": key},
        )

    groups = video_groups(
        [
            s("a", "/v/1.mp4", "k1"),
            s("b", "/v/1.mp4", "k2"),
            s("c", "/v/2.mp4", "k2"),
            s("d", "/v/3.mp4", "k3"),
        ]
    )
    assert groups == ["k1", "k1", "k1", "k3"]


def test_apportion_and_split_are_deterministic():
    assert apportion(13368, WEIGHTS) == WEIGHTS
    assert apportion(7, {"a": 1, "b": 1, "c": 1}) == {"a": 3, "b": 2, "c": 2}
    assert split_of("nexar/00822", 0, {"train": 0.9, "val": 0.1}) == split_of(
        "nexar/00822", 0, {"train": 0.9, "val": 0.1}
    )
    shares = [split_of(f"v{i}", 0, {"train": 0.9, "val": 0.1}) for i in range(1000)]
    assert 850 < shares.count("train") < 950


def _mix_cmd(
    built, out, seed, splits=("data.splits.train=0.5", "data.splits.val=0.25", "+data.splits.test=0.25")
):
    return [
        "mix",
        "data=mix_p3i",
        f"data.root={built}",
        f"data.dir={out}",
        f"data.seed={seed}",
        "data.total=20",
        *splits,
    ]


def _split_files(out):
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _videos_by_split(out):
    splits = json.loads((out / "mixture.json").read_text())["splits"]
    return {
        name: {(out / name / s.video).resolve() for s in load_streams(out / name / "records.jsonl")}
        for name in splits
    }


# Runs the mix command and dies by SIGKILL, with no chance to clean up: ``write`` when the second
# split starts to be written (the first, train, is written by then); ``swap`` when the first new
# split has been moved into the mixture folder.
KILLED_MIX = """
import os, signal, sys
import data_builders.mixture as mixture, data_builders.outputs as outputs
from data_builders.__main__ import main
def die():
    os.kill(os.getpid(), signal.SIGKILL)
calls = []
real = outputs.write_files
def write_files(*args, **kwargs):
    calls.append(args[0])
    if len(calls) == 2:
        die()
    return real(*args, **kwargs)
def commit(staging, out):
    first = sorted(p for p in staging.iterdir() if not p.name.startswith("."))[0]
    os.replace(first, out / first.name)
    die()
if sys.argv[1] == "write":
    for module in (outputs, mixture):
        if hasattr(module, "write_files"):
            module.write_files = write_files
else:
    mixture.commit = commit
main(sys.argv[2:])
"""


def test_a_mixture_rebuild_killed_after_train_leaves_the_old_mixture_whole(tmp_path, built):
    out = tmp_path / "mix"
    run = [sys.executable, "-m", "data_builders"]
    first = subprocess.run([*run, *_mix_cmd(built, out, 0)], capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    old = _split_files(out)
    old_videos = _videos_by_split(out)
    assert {k: len(v) for k, v in old_videos.items()} == {"train": 4, "val": 2, "test": 2}  # 8 videos
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_MIX, "write", *_mix_cmd(built, out, 1)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr
    # the rebuild died mid-way: no video in two splits, and the old mixture is there, file for file
    videos = _videos_by_split(out)
    shared = {(a, b): len(videos[a] & videos[b]) for a in videos for b in videos if a < b}
    assert shared == {("test", "train"): 0, ("test", "val"): 0, ("train", "val"): 0}
    assert {k: v for k, v in _split_files(out).items() if not k.startswith(".")} == {
        k: v for k, v in old.items() if not k.startswith(".")
    }
    # killed in the swap itself: the splits there are the new mixture's only, and no mixture.json
    # says it is complete
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_MIX, "swap", *_mix_cmd(built, out, 1)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "mixture.swap.json",
        "test",
    ]
    assert (out / "test/records.jsonl").read_bytes() != old["test/records.jsonl"]  # the new one's
    # a rerun builds the new mixture whole, and fewer splits leave no split of either behind
    again = subprocess.run(
        [*run, *_mix_cmd(built, out, 1, ["data.splits={train: 0.5, val: 0.5}"])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    videos = _videos_by_split(out)
    assert sorted(videos) == ["train", "val"] and not (out / "test").exists()
    assert not videos["train"] & videos["val"] and len(videos["train"] | videos["val"]) == 8
    assert not (out / "mixture.swap.json").exists()
    # each killed run's staging folder went with the next run, which said so
    assert not [p.name for p in out.iterdir() if p.name.startswith(".staging-")]
    assert [
        killed.stderr.count("left by a writer that died"),
        again.stderr.count("left by a writer that died"),
    ] == [1, 1]


def test_mix_stops_on_a_folder_another_run_holds(tmp_path, built):
    from infra.files import OutputLock

    out = tmp_path / "mix"
    with OutputLock(out, "data_builders build source=shot2story"):
        proc = subprocess.run(
            [sys.executable, "-m", "data_builders", *_mix_cmd(built, out, 0)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 1
    assert (
        f"{out} is in use by another run" in proc.stderr
        and "data_builders build source=shot2story" in proc.stderr
    )
    assert not (out / "train").exists() and not (out / "mixture.json").exists()


def test_a_mixture_into_a_read_only_folder_is_one_line_and_keeps_the_mixture(tmp_path, built):
    """Was ``OSError: [Errno 30]`` and a traceback: now exit 2, one line naming data.dir and the
    reason; the mixture there stays byte for byte, and the same command mixes once it is writable."""
    out = tmp_path / "mix"
    assert run_module("data_builders", *_mix_cmd(built, out, 0)).returncode == 0
    before = _split_files(out)
    done = read_only_run("data_builders", _mix_cmd(built, out, 1), out)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert [line for line in done.stderr.splitlines() if not line.startswith("INFO ")] == [
        f"mixture failed: cannot write in {out} ({out / '.lock'}): read-only file system: the mixture in "
        f"{out} is kept as it was; make it writable (or give another folder) and rerun the same command to go on"
    ]
    assert _split_files(out) == before
    assert (
        run_module("data_builders", *_mix_cmd(built, out, 1)).returncode == 0 and _split_files(out) != before
    )
