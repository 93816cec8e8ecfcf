"""``eval.run benchmark=<public benchmark>`` in both protocol modes, on a toy release of each format.

Each release below is our own, in the benchmark's structure (values invented; videos are toy mp4s).
It goes through the real builder (``data_builders.build.build_source``), then ``eval.run`` on the
untrained tiny model at a threshold where it fires on about half the steps. Every run must write
the benchmark's own files into ``<out>/official/``, and ``metrics.json`` must be what ``eval.score``
prints on them; the prediction file must follow the mode's rule (checked against predictions.jsonl).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from benchmarks.protocols.streamingbench_proactive import PROMPT_TEMPLATE
from data_builders.build import build_source
from data_builders.record_io import load_streams
from data_builders.synthetic.toy import write_mp4
from eval import score
from eval.run import evaluate, load_config
from eval.store import PredictionLog

FIRING = 0.465  # the untrained tiny model sits near P(response) 0.46 on these streams: it fires on some steps

OVO = [
    {"id": 1, "task": "EPM", "video": "a.mp4", "realtime": 6, "question": "Where is the cup?",
     "answer": "on the table", "options": ["in the sink", "on the table", "on the shelf"], "gt": 1},
    {"id": 2, "task": "STU", "video": "a.mp4", "realtime": 9.5, "question": "What is moving?",
     "answer": "the door", "options": ["the door", "the cat"], "gt": 0},
    {"id": 3, "task": "REC", "video": "a.mp4", "activity": "opening the door", "start_times": [2, 7],
     "end_times": [3, 8], "test_info": [{"realtime": 4, "count": 1}, {"realtime": 10, "count": 2}]},
    {"id": 4, "task": "SSR", "video": "b.mp4", "tutorial": "MakeTea", "all_steps": ["boil", "pour"],
     "start_time": [1, 6], "end_time": [5, 11], "test_info": [
         {"realtime": 3, "step": "boil", "type": 1}, {"realtime": 5, "step": "pour", "type": 0},
         {"realtime": 8, "step": "pour", "type": 1}]},
    {"id": 5, "task": "CRR", "video": "b.mp4", "question": "What colour is the kettle?", "answer": "red",
     "ask_time": 2, "clue_time": 7, "test_info": [{"realtime": 4, "type": 0}, {"realtime": 9, "type": 1}]},
]  # fmt: skip
STREAMINGBENCH = [
    {"time": "[0:00:00 - 0:00:20]", "video_categories": "cooking", "video_path": "./videos/a.mp4",
     "questions": [
         {"task_type": "Proactive Output", "question": "Say \"lid\" when the lid comes off.",
          "time_stamp": "00:00:02", "ground_truth_time_stamp": "00:00:07", "ground_truth_output": "lid",
          "required_ability": "event"},
         {"task_type": "Proactive Output", "question": "Say \"done\" when it stops.",
          "time_stamp": "00:00:04", "ground_truth_time_stamp": "00:00:12", "ground_truth_output": "done",
          "required_ability": "event"}]},
]  # fmt: skip
PVQA = [
    {"video": "a.mp4", "question_id": "ego_q0", "duration": 14.0,
     "conversation": [{"role": "user", "content": "Tell me each step I take.", "time": 1}],
     "answer": [{"content": "You fill the kettle.", "related_timespan": [2.0, 4.0], "reply_timespan": [2.0, 7.0]},
                {"content": "You pour the water.", "related_timespan": [8.0, 9.0], "reply_timespan": [8.0, 13.0]}]},
]  # fmt: skip
ESTP = {
    "vid-a": {"clip-1": [
        {"clip_start_time": 2.0, "clip_end_time": 16.0, "Task Type": "Object Recognition",
         "question": "Tell me what the red tin is.", "conversation": [
             {"role": "assistant", "content": "A tin of tomatoes.", "start_time": 5.0, "end_time": 7.0},
             {"role": "assistant", "content": "Chopped tomatoes.", "start_time": 11.0, "end_time": 12.0}]}]},
}  # fmt: skip


def _mp4(path: Path, seconds: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_mp4(path, [np.full((32, 32, 3), (29 * i) % 255, np.uint8) for i in range(seconds)], 1)


def _release(name: str, root: Path) -> tuple[Path, Path]:
    """(annotations, videos) of the toy release of ``name`` written under ``root``."""
    videos = root / "videos"
    root.mkdir(parents=True)
    if name == "ovo":
        ann = root / "ovo_bench_new.json"
        ann.write_text(json.dumps(OVO))
        _mp4(videos / "a.mp4", 12)
        _mp4(videos / "b.mp4", 10)
    elif name == "streamingbench_proactive":
        ann = root / "questions_proactive.json"
        ann.write_text(json.dumps(STREAMINGBENCH))
        _mp4(videos / "videos/a.mp4", 20)
    elif name == "proactivevideoqa":
        ann = root / "EGO" / "anno.json"
        ann.parent.mkdir()
        ann.write_text(json.dumps(PVQA))
        _mp4(root / "EGO" / "videos" / "a.mp4", 14)
        videos = root
    else:
        ann = root / "estp_bench_sq.json"
        ann.write_text(json.dumps(ESTP))
        _mp4(videos / "vid-a.mp4", 16)
    return ann, videos


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``built(name)`` -> the records file of the toy release of ``name``, built once."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            root = tmp_path_factory.mktemp(name)
            ann, videos = _release(name, root / "release")
            report = build_source(name, root / "out", annotations=ann, videos=videos, workers=1)
            assert report.errors == [], report.errors
            made[name] = root / "out" / "records.jsonl"
        return made[name]

    return get


def _run(ckpt: Path, records: Path, tmp: Path, name: str, mode: str, *extra: str) -> tuple[dict, Path]:
    out = tmp / f"{name}-{mode}"
    cfg = load_config(
        [
            f"checkpoint={ckpt}",
            f"records={records}",
            f"paths.cache_dir={tmp / 'cache'}",
            f"paths.runs_dir={tmp / 'runs'}",
            "render.max_pixels=4096",
            "max_new_tokens=4",
            f"threshold={FIRING}",
            f"out_dir={out}",
            f"benchmark={name}",
            f"benchmark.protocol_mode={mode}",
            *extra,
        ]
    )
    return evaluate(cfg, echo=False), out


def _rescored(out: Path, capsys) -> dict:
    """What ``python -m eval.score`` prints for the command the run wrote."""
    argv = shlex.split((out / "official" / "score_command.txt").read_text())
    assert argv[:3] == ["python", "-m", "eval.score"]
    capsys.readouterr()
    assert score.main(argv[3:]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _same_figures(metrics: dict, rescored: dict, mode: str, out: Path) -> None:
    assert metrics["protocol_mode"] == mode
    assert metrics["official_files"]["pred"].startswith(str(out / "official"))
    assert {k: v for k, v in metrics.items() if k not in ("protocol_mode", "official_files")} == rescored
    assert json.loads((out / "metrics.json").read_text()) == metrics


def _replies(out: Path) -> dict[str, list[dict]]:
    return {r["id"]: r["replies"] for r in PredictionLog(out / "predictions.jsonl").rows()}


def test_streamingbench_streaming_run_writes_the_harness_file(tiny_checkpoint, built, tmp_path, capsys):
    records = built("streamingbench_proactive")
    metrics, out = _run(tiny_checkpoint, records, tmp_path, "streamingbench_proactive", "streaming")
    _same_figures(metrics, _rescored(out, capsys), "streaming", out)
    data = json.loads(Path(metrics["official_files"]["pred"]).read_text())
    questions = [q for entry in data for q in entry["questions"]]
    replies = _replies(out)
    streams = load_streams(records)
    assert len(questions) == len(streams) == 2
    answered = []
    for s, q in zip(streams, questions, strict=True):
        want = replies[s.id][0]["time"] if replies[s.id] else None  # the first reply, at its own time
        entry = q["proactive_vlm"]
        assert entry["answered"] == (want if want is not None else False)
        answered.append(want)
        if want is not None:
            assert entry["dialog_history"][-1]["time"] == want
    assert any(a is not None for a in answered)  # the model spoke: the check above was not vacuous
    n_time = sum(a is not None and abs(a - s.targets[0].time) <= 2 for a, s in zip(answered, streams))
    assert metrics["time_accuracy"] == n_time / 2


# The harness's prompt and poll query (``src/benchmark/StreamingBenchProactive.py``), as its text
# reads: ``PROMPT_TEMPLATE_PROACTIVE`` and ``query``.
OFFICIAL_PROMPT = """You are an advanced image question-answering AI assistant. You have been provided with images and a question related to the images. Your task is to carefully analyze the images and provide the answer to the question. You need to carefully confirm whether the images content meet the conditions of the question, and then output the correct content.

Question: {}

The answer is:
"""


def official_query(q: dict) -> str:
    return f'{q["question"]} Is it the right time to output "{q["ground_truth_output"]}"? You can only answer yes or no.'


def test_streamingbench_official_run_asks_the_harness_s_questions(
    tiny_checkpoint, built, tmp_path, capsys, monkeypatch
):
    """Official mode asks what the harness asks, on its clips: at each poll c from time_stamp + 1 to
    the ground truth + 4, the poll query (the expected output in it) inside the harness's prompt, on
    the clip [time_stamp, c) (its last frame at c - 1); after a reply with "yes", the bare question
    inside the same prompt on the same clip, and that reply is the answer. The untrained model never
    says yes, so the engine's reply to the first question's poll at 8 s is made "Yes." here."""
    from engine import probes

    seen: list[tuple] = []
    decode = probes._ProbeEngine._decode

    def recording(self, probe, time, chunk, grid, image, full_logits):
        got = decode(self, probe, time, chunk, grid, image, full_logits)
        if probe.key == ("poll", 8) and 'Say "lid"' in probe.prompt:
            got = dataclasses.replace(got, text="Yes.")
        seen.append((probe.key, time, self.renderer.tokenizer.decode(chunk), got.text))
        return got

    monkeypatch.setattr(probes._ProbeEngine, "_decode", recording)
    records = built("streamingbench_proactive")
    metrics, out = _run(tiny_checkpoint, records, tmp_path, "streamingbench_proactive", "official")
    _same_figures(metrics, _rescored(out, capsys), "official", out)
    [lid, done] = STREAMINGBENCH[0]["questions"]  # time_stamp 2, gt 7 and time_stamp 4, gt 12
    calls = {"lid": seen[:7], "done": seen[7:]}
    # the first question: polls at 3..8 s, "Yes." at 8, then the bare question at 8 s; the second:
    # every poll 5..16 s (no reply says yes)
    assert [k for k, *_ in calls["lid"]] == [("poll", c) for c in range(3, 9)] + [("question", 8)]
    assert [k for k, *_ in calls["done"]] == [("poll", c) for c in range(5, 17)]
    assert not any("yes" in text.lower() for *_, text in calls["done"])
    for q, asked in ((lid, calls["lid"]), (done, calls["done"])):
        for (turn, c), time, chunk, _ in asked:
            assert time == c - 1  # the clip [time_stamp, c) ends with the frame at c - 1
            prompt = OFFICIAL_PROMPT.format(official_query(q) if turn == "poll" else q["question"])
            assert prompt in chunk
    assert PROMPT_TEMPLATE == OFFICIAL_PROMPT
    # the prediction file: the dialog history as the harness writes it (both user turns as asked)
    data = json.loads(Path(metrics["official_files"]["pred"]).read_text())
    for q, asked in zip(data[0]["questions"], (calls["lid"], calls["done"]), strict=True):
        history = q["proactive_vlm"]["dialog_history"]
        users = [(t["content"], t["time"]) for t in history[0::2]]
        want = [(official_query(q) if turn == "poll" else q["question"], c) for (turn, c), *_ in asked]
        assert users == want
        assert [t["content"] for t in history[1::2]] == [text for *_, text in asked]
        assert all(t["role"] == r for t, r in zip(history, ["user", "assistant"] * len(asked)))
    entries = [q["proactive_vlm"] for q in data[0]["questions"]]
    assert [e["answered"] for e in entries] == [8, False]
    # 8 s is within 2 s of 7 s: one of two on time; the answer counts if "lid" is in it
    assert metrics["time_accuracy"] == 0.5
    assert metrics["answer_accuracy"] == ("lid" in calls["lid"][-1][3]) / 2


@pytest.mark.parametrize("mode", ["official", "streaming"])
def test_ovo_run_writes_the_prediction_folder(tiny_checkpoint, built, tmp_path, mode, capsys):
    records = built("ovo")
    metrics, out = _run(tiny_checkpoint, records, tmp_path, "ovo", mode)
    _same_figures(metrics, _rescored(out, capsys), mode, out)
    files = list(Path(metrics["official_files"]["pred"]).glob("*.json"))
    assert len(files) == 1
    parts = json.loads(files[0].read_text())
    assert [len(parts[p]) for p in ("backward", "realtime", "forward")] == [1, 1, 3]
    responses = [i["response"] for p in ("backward", "realtime") for i in parts[p]]
    responses += [t["response"] for i in parts["forward"] for t in i["test_info"]]
    assert len(responses) == 2 + 2 + 3 + 2
    if mode == "official":  # every question and probe is asked and answered
        assert all(isinstance(r, str) for r in responses)
        replies = _replies(out)
        assert sum(len(v) for v in replies.values()) == 9
        # each on the official cut [0, ceil(t)]: after the frame at ceil(t) - 1 (probes at 6, 9.5;
        # REC 4, 10; SSR 3, 5, 8; CRR 4, 9; the videos are 12 s and 10 s long)
        asked = {k: [r["time"] for r in v] for k, v in replies.items()}
        assert asked == {"ovo-1": [5], "ovo-2": [9], "ovo-3": [3, 9], "ovo-4-step0": [2],
                         "ovo-4-step1": [4, 7], "ovo-5": [3, 8]}  # fmt: skip
    else:
        crr = next(i for i in parts["forward"] if i["task"] == "CRR")
        said = [r["time"] for r in _replies(out)["ovo-5"]]
        want = ["Yes" if any(2 <= t <= p["realtime"] for t in said) else "No" for p in crr["test_info"]]
        assert [p["response"] for p in crr["test_info"]] == want
    for key in ("backward", "realtime", "forward", "total"):
        assert 0 <= metrics[key] <= 100


def _judge(prompt: str) -> str:
    """A judge that rates by the length of what was said so far: deterministic, 1-3."""
    said = re.search(r"Predicted answer: (.*)", prompt).group(1)
    return f"Score: {1 + len(said) % 3}"


@pytest.mark.parametrize("mode", ["official", "streaming"])
def test_proactivevideoqa_run_writes_pred_jsonl(tiny_checkpoint, built, tmp_path, mode, capsys, chat_server):
    records = built("proactivevideoqa")
    with chat_server(_judge) as server:
        extra = [f"benchmark.judge_url={server.url}", "benchmark.judge_model=toy-judge"]
        # the reply clock: the default, the released inference's (the seconds of video seen, one
        # frame after the frame a reply follows), in one mode; each frame's own time in the other
        later = 1.0 if mode == "official" else 0.0
        extra += [] if mode == "official" else ["benchmark.reply_clock=frame"]
        extra.append(f"benchmark.judge_cache={tmp_path / 'judge.sqlite'}")
        metrics, out = _run(tiny_checkpoint, records, tmp_path, "proactivevideoqa", mode, *extra)
        rescored = _rescored(out, capsys)
    judge, again = metrics["judge"], rescored.pop("judge")
    assert judge["requests"] > 0 and again["cache_hits"] == judge["requests"] + judge["cache_hits"]
    _same_figures(metrics, {**rescored, "judge": judge}, mode, out)  # the rescore read the cache
    [line] = [
        json.loads(x) for x in (out / "official" / "pred" / "ego" / "pred.jsonl").read_text().splitlines()
    ]
    said = [r for r in _replies(out)["proactivevideoqa-EGO-ego_q0"]]
    turns = [t for t in line["model_response_list"] if t["role"] == "assistant"]
    assert [(t["time"], t["content"]) for t in turns] == [(r["time"] + later, r["text"]) for r in said]
    assert len(said) > 0 and metrics["num_turns"] == 2
    assert all(0 <= metrics[k] <= 100 for k in ("omega=0", "omega=0.5", "omega=1"))


@pytest.mark.parametrize("mode", ["official", "streaming"])
def test_estp_run_writes_the_release_with_the_model_s_answers(tiny_checkpoint, built, tmp_path, mode, capsys):
    records = built("estp")
    # the single question at the clip start (the default) in one mode; in the other at EyeWO's
    # loader's time: drawn in [2, 5] s (the clip starts at 2 s, the first answer's midpoint is 6 s)
    clock = [] if mode == "official" else ["benchmark.question_time=before_first_answer"]
    metrics, out = _run(tiny_checkpoint, records, tmp_path, "estp", mode, "benchmark.content=any", *clock)
    _same_figures(metrics, _rescored(out, capsys), mode, out)
    data = json.loads(Path(metrics["official_files"]["pred"]).read_text())
    qa = data["vid-a"]["clip-1"][0]
    [said] = _replies(out).values()
    [question, *replies] = qa["proactive_vlm"]["dialog_history"]
    asked = 2.0 if mode == "official" else random.Random("vid-a/clip-1[0]").uniform(2.0, 5.0)
    assert question == {"role": "user", "content": "Tell me what the red tin is.", "time": asked}
    assert [t["time"] for t in replies] == [r["time"] for r in said]
    assert len(said) > 0 and math.isfinite(metrics["ESTP-F1"])


def test_a_mode_the_protocol_lacks_is_refused_before_streaming(tiny_checkpoint, toy_dir, tmp_path):
    cfg = load_config(
        [
            f"checkpoint={tiny_checkpoint}",
            f"records={toy_dir / 'records.jsonl'}",
            "benchmark.protocol_mode=official",
        ]
    )
    with pytest.raises(ValueError, match=r"protocol_mode='official' is not one of the p3i protocol's modes"):
        evaluate(cfg)
    for name, key, message in (
        ("estp", "question_time", "question_time='late' is not one of clip_start, before_first_answer"),
        ("proactivevideoqa", "reply_clock", "reply_clock='late' is not one of frame, frames_seen"),
    ):
        cfg = load_config(
            [f"checkpoint={tiny_checkpoint}", f"records={toy_dir / 'records.jsonl'}", f"benchmark={name}"]
            + [f"benchmark.{key}=late", "benchmark.content=any"]
        )
        with pytest.raises(ValueError, match=message):
            evaluate(cfg)


@pytest.mark.slow  # GRPO with a held-out evaluation, then the sweep table (19 s loaded)
def test_grpo_held_out_on_a_public_benchmark_reaches_the_sweep_table(built, tmp_path):
    """GRPO's held-out evaluations on StreamingBench (``grpo.eval_benchmark``, ``eval_records``):
    the figures land in history.jsonl under ``eval/``, ``keep_best`` keeps by ``answer_accuracy``
    and ``eval.sweep_table --metric eval/time_accuracy`` compares them."""
    import os
    import subprocess
    import sys

    from data_builders.mixture import build_toy_mixture
    from eval import sweep_table

    root = Path(__file__).resolve().parents[2]
    mixture = build_toy_mixture(tmp_path / "built", tmp_path / "toy", n=8, seed=0)
    records = built("streamingbench_proactive")
    cmd = [sys.executable, "-m", "train.grpo", "-m", f"paths.root_dir={tmp_path}", f"data.dir={mixture}"]
    cmd += ["init=random", "grpo.windows_per_step=1", "grpo.num_generations=2", "grpo.window_steps=10"]
    cmd += ["grpo.max_new_tokens=4", "grpo.max_steps=1", "grpo.eval_every=1", "grpo.keep_best=true"]
    cmd += ["grpo.eval_benchmark=streamingbench_proactive", f"grpo.eval_records={records}"]
    cmd += ["grpo.best_metric=answer_accuracy", f"grpo.eval_threshold={FIRING}", "grpo.temperature=5.0"]
    run = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-3000:]
    [point] = [p for p in (tmp_path / "runs").glob("*_sweep/*") if p.is_dir()]
    rows = [json.loads(line) for line in (point / "history.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/time_accuracy" in r]
    assert [r["step"] for r in evals] == [0, 1]  # before the update and after it
    assert all(0 <= r["eval/answer_accuracy"] <= 1 for r in evals)
    best = json.loads((point / "best" / "best.json").read_text())
    assert best["metric"] == "answer_accuracy"
    assert best["value"] == max(r["eval/answer_accuracy"] for r in evals)
    _, [row] = sweep_table.sweep_rows(point.parent, "eval/time_accuracy")
    assert (row["final_update"], row["final"]) == (1, evals[-1]["eval/time_accuracy"])


def test_the_public_figures_are_w_and_b_curves(tiny_checkpoint, built, tmp_path, monkeypatch, offline_run):
    """An evaluation's OVO-Bench figures land in its W&B run under ``eval/ovo/``, at the checkpoint's step."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wb").mkdir()
    metrics, _ = _run(tiny_checkpoint, built("ovo"), tmp_path, "ovo", "streaming", "logger=wandb", "step=7")
    [run] = list((tmp_path / "wb" / "wandb").glob("offline-run-*"))
    summary = offline_run(run)["summary"]
    assert summary["train/global_step"] == 7
    for key in ("total", "backward", "realtime", "forward", "REC", "SSR", "CRR", "EPM", "STU"):
        assert summary[f"eval/ovo/{key}"] == metrics[key]
