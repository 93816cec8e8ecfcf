"""A user's path through the project, as docs/data.md and docs/evaluation.md write it, each command
in its own process: the example streams file built, mixed, trained for 2 SFT steps and evaluated;
the checkpoint exported; the exported folder loaded and streamed with the card's plain
``transformers`` loop in a process that imports nothing of the project, which gives the first
reply (time and text) ``eval.run`` gives on the same record."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.data_builders.test_jsonl_source import example_lines, write_example

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
#: Keep the tiny run short: 2 SFT steps, no evaluation split.
FAST = {
    "train.sft": [
        "sft.max_steps=2",
        "sft.save_steps=2",
        "sft.per_device_batch_size=2",
        "sft.eval_split=null",
        "sft.num_threads=2",
        "sft.time_budget_s=null",
    ],
    "eval.run": [],
}
PROJECT = (
    "data_builders",
    "engine",
    "benchmarks",
    "eval",
    "train",
    "pipeline",
    "metrics",
    "infra",
)


def run(cmd: list[str], cwd: Path, project: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"}
    if project:
        env["PYTHONPATH"] = str(ROOT)
    else:
        env.pop("PYTHONPATH", None)
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{cmd}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return out


def doc_commands() -> list[str]:
    """The commands of docs/data.md's "Your own data" section, in order."""
    text = (ROOT / "docs" / "data.md").read_text(encoding="utf-8")
    section = text.split("## Your own data", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^python -m .+$", section, flags=re.M)


@pytest.fixture(scope="module")
def user(tmp_path_factory) -> Path:
    """A folder where the docs' commands ran: the example built (and the toy source beside it),
    both mixtures, a 2-step SFT run on ``data=own`` and its evaluation on the user's records."""
    from data_builders.build import build_source

    home = tmp_path_factory.mktemp("user")
    write_example(home)
    # the toy source beside it, built in this process (the docs' commands below each get their own)
    build_source("toy", home / "data/built/toy", options={"n": 8})
    for line in doc_commands():
        args = line.split()[2:]
        run([sys.executable, "-m", *args, *FAST.get(args[0], [])], home)
    return home


def test_the_users_streams_train_and_their_own_task_is_scored_in_a_row_of_its_own(user):
    mixed = json.loads((user / "data/toy_mine/mixture.json").read_text())
    assert {k: v["taken"] for k, v in mixed["sources"].items()} == {"mine": 5, "toy": 8}
    assert (user / "runs/sft/final/model.safetensors").is_file()
    (metrics_file,) = (user / "runs/eval").rglob("metrics.json")
    metrics = json.loads(metrics_file.read_text())
    assert metrics["n"] == {"accident_warning": 1, "custom": 1, "kettle_watch": 1}
    assert metrics["negatives"]["n"] == 2  # the two clips without responses
    assert set(metrics["per_task"]) == {"accident_warning", "custom", "kettle_watch"}


def test_a_stream_with_two_questions_trains_on_its_window_and_is_evaluated(tmp_path):
    """docs/data.md's line with ``questions`` alone (the instruction at 2 s, a second question at
    10 s): built, mixed, trained for 2 SFT steps on its one window and evaluated by ``eval.run``,
    each in its own process (the renderer's turns: tests/data_builders/test_jsonl_source.py)."""
    write_example(tmp_path)
    (line,) = [row for row in example_lines().splitlines() if '"questions"' in row]
    (tmp_path / "chat.jsonl").write_text(line + "\n")
    m = [sys.executable, "-m"]
    run(
        [
            *m,
            "data_builders",
            "build",
            "source=jsonl",
            "annotations=chat.jsonl",
            "videos=videos",
            "out=data/built/chat",
        ],
        tmp_path,
    )
    (built,) = [
        json.loads(row) for row in (tmp_path / "data/built/chat/records.jsonl").read_text().splitlines()
    ]
    assert (built["id"], built["instruction_time"]) == ("desk-1", 2.0)
    assert built["meta"]["user_turns"] == [{"time": 10.0, "content": "And when I put it down?"}]
    run(
        [
            *m,
            "data_builders",
            "mix",
            "data=own",
            "data.root=data/built",
            "data.dir=data/own",
            "data.sources.chat.weight=1",
        ],
        tmp_path,
    )
    sft = [o.replace("batch_size=2", "batch_size=1") for o in FAST["train.sft"]]
    out = run([*m, "train.sft", "data=own", "data.dir=data/own", *sft], tmp_path)
    assert "train windows: 1 from" in out.stdout + out.stderr  # the one stream, whole
    assert (tmp_path / "runs/sft/final/model.safetensors").is_file()
    records = "records=data/built/chat/records.jsonl"
    run([*m, "eval.run", "checkpoint=runs/sft/final", "benchmark=p3i", records], tmp_path)
    (predictions,) = (tmp_path / "runs/eval").rglob("predictions.jsonl")
    (row,) = [json.loads(r) for r in predictions.read_text().splitlines()]
    assert row["id"] == "desk-1" and len(row["p_response"]) == 20  # a decision at every step of the clip


@pytest.fixture(scope="module")
def exported(user) -> Path:
    run([sys.executable, "-m", "train.export", "checkpoint=runs/sft/final", "out=exports/mine"], user)
    return user / "exports" / "mine"


LOAD = """
import json, sys
from transformers import AutoModelForImageTextToText, AutoProcessor
model = AutoModelForImageTextToText.from_pretrained(sys.argv[1])
processor = AutoProcessor.from_pretrained(sys.argv[1])
tok = processor.tokenizer
turn = [{"role": "user", "content": [{"type": "text", "text": "<0.0 seconds>"}, {"type": "image"}]}]
print(json.dumps({
    "modules": sorted({m.split(".")[0] for m in sys.modules}),
    "decision": tok.convert_tokens_to_ids(["</Silence>", "</Response>"]),
    "special": [t in tok.all_special_tokens for t in ("</Silence>", "</Response>")],
    "prompt": processor.apply_chat_template(turn, add_generation_prompt=True),
    "eos": model.generation_config.eos_token_id, "im_end": tok.convert_tokens_to_ids("<|im_end|>"),
    "vocab": model.get_input_embeddings().weight.shape[0],
}))
"""


def test_the_exported_folder_loads_with_transformers_alone_and_holds_the_turn_format(exported, user):
    files = sorted(p.name for p in exported.iterdir())
    assert {"model.safetensors", "config.json", "generation_config.json", "render.json", "README.md"} <= set(
        files
    )
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl"))]
    out = run([sys.executable, "-I", "-c", LOAD, str(exported)], cwd=exported.parent, project=False)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert not set(got["modules"]) & set(PROJECT)
    assert (
        got["special"] == [True, True]
        and got["decision"][0] < got["vocab"]
        and got["decision"][1] < got["vocab"]
    )
    assert got["prompt"] == (
        "<|im_start|>user\n<0.0 seconds><|vision_start|><|image_pad|><|vision_end|><|im_end|>\n<|im_start|>assistant\n"
    )
    assert got["eos"] == got["im_end"]
    assert json.loads((exported / "render.json").read_text()) == json.loads(
        (user / "runs/sft/final/render.json").read_text()
    )


def test_the_card_is_in_the_hubs_format_with_the_evaluation_of_these_weights(exported, user):
    card = (exported / "README.md").read_text()
    assert card.startswith("---\n")
    meta = yaml.safe_load(card.split("---\n", 2)[1])
    assert meta["pipeline_tag"] == "image-text-to-text" and meta["library_name"] == "transformers"
    assert "sft" in meta["tags"] and meta["datasets"] == ["mine"]
    assert "base_model" not in meta  # the tiny model starts from no hub id
    (metrics_file,) = (user / "runs/eval").rglob("metrics.json")
    metrics = json.loads(metrics_file.read_text())
    (result,) = meta["model-index"][0]["results"]
    assert result["dataset"]["type"] == "p3i" and result["dataset"]["config"] == "streaming"
    values = {m["type"]: m["value"] for m in result["metrics"]}
    assert values["prs_u"] == metrics["prs_u"] and values["prs_b"] == metrics["prs_b"]
    assert "## Training" in card and "| mine |" in card


def eval_first_record(user: Path, records: Path, threshold: float, out_dir: Path) -> dict:
    """``eval.run`` of the exported model on the first record, in this process (the fixture ran the
    command itself): its predictions row."""
    from eval.run import evaluate, load_config

    args = [
        f"checkpoint={user / 'exports/mine'}",
        f"records={records}",
        "limit=1",
        f"threshold={threshold!r}",
    ]
    evaluate(load_config([*args, f"out_dir={out_dir}", f"paths.root_dir={user}"]))
    return json.loads((out_dir / "predictions.jsonl").read_text().splitlines()[0])


def card_snippet(card: str) -> str:
    return card.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_cards_loop_in_plain_transformers_gives_eval_runs_first_reply(exported, user, tmp_path):
    from train.model_card import STREAM_SNIPPET

    snippet = card_snippet((exported / "README.md").read_text())
    docs = (ROOT / "docs" / "evaluation.md").read_text().split("<!-- snippet: stream -->\n", 1)[1]
    assert snippet == STREAM_SNIPPET == card_snippet(docs)
    records = user / "data/built/mine/records.jsonl"
    (stream,) = [json.loads(line) for line in records.read_text().splitlines()][:1]
    # the engine's P(response) at each step (the docs' evaluation of final/, silent at 0.5), then a
    # threshold it first passes at a later step
    (done,) = (user / "runs/eval").rglob("predictions.jsonl")
    p = next(
        json.loads(line) for line in done.read_text().splitlines() if json.loads(line)["id"] == stream["id"]
    )
    p = p["p_response"]
    k = next(k for k in range(2, len(p)) if p[k] - max(p[:k]) > 1e-4)
    threshold = (max(p[:k]) + p[k]) / 2
    first = eval_first_record(user, records, threshold, user / "at_threshold")["replies"][0]
    assert first["time"] == float(k)

    inputs = {
        "MODEL": str(exported),
        "VIDEO": str((records.parent / stream["video"]).resolve()),
        "INSTRUCTION": stream["instruction"],
        "THRESHOLD": threshold,
    }
    code = snippet
    for name, value in inputs.items():
        code, n = re.subn(rf"^{name} = .*$", f"{name} = {value!r}", code, count=1, flags=re.M)
        assert n == 1, name
    script = tmp_path / "stream.py"
    script.write_text(code)
    guard = f"import runpy, sys; runpy.run_path({str(script)!r}); assert not {{m.split('.')[0] for m in sys.modules}} & {set(PROJECT)!r}"
    out = run([sys.executable, "-I", "-c", guard], cwd=tmp_path, project=False)
    replies = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert first["text"] and replies[0] == {"time": first["time"], "text": first["text"]}
