"""benchmarks/protocols: every protocol is found by name whatever was imported first, and a fifth
benchmark added by the steps of docs/design.md ("Adding a benchmark, a reward or a data source"):
its module defining one ``Protocol``, its line in the table, its YAML (scored by its ``score``, run by
``get_runner``, composed and run by ``eval.run``, scored again by ``eval.score``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import protocols, runners, scoring
from benchmarks.protocols.base import Protocol
from data_builders.record_io import load_streams
from data_builders.records import Target
from engine.replies import Reply
from eval import score
from eval.run import evaluate, load_config
from eval.store import PredictionLog

ROOT = Path(__file__).resolve().parents[2]
OURS = {"p3i", "egoserve", "propermem"}
PUBLIC = {"estp", "ovo", "proactivevideoqa", "streamingbench_proactive"}

# A benchmark nobody ships: only a reply's timing counts, and only the first reply of a stream.
FIFTH = '''
"""Toy protocol: a target is hit when the stream's first reply comes within 2 s after it."""

from benchmarks.protocols.base import Protocol, ProtocolRunner


class FifthRunner(ProtocolRunner):
    def replies(self, result, bench):
        replies, dropped = super().replies(result, bench)
        return replies[:1], dropped + max(0, len(replies) - 1)


def score_fifth(paired, settings):
    hits, rows, negatives = {}, [], 0
    for gt, replies in paired:
        if not gt.targets:
            negatives += 1
            continue
        t = gt.targets[0].time
        hit = bool(replies) and t <= replies[0].time <= t + 2.0
        hits.setdefault(gt.task, []).append(hit)
        rows.append({"id": gt.id, "hit": hit})
    every = [h for v in hits.values() for h in v]
    return {
        "hit": 100.0 * sum(every) / len(every),
        "n": {task: len(v) for task, v in hits.items()},
        "per_task": {task: {"hit": 100.0 * sum(v) / len(v)} for task, v in hits.items()},
        "negatives": negatives,
    }, rows


PROTOCOL = Protocol("fifth", runner=FifthRunner, scorer=score_fifth)
'''
YAML = "name: fifth\nprotocol: fifth\nsteps_per_second: 1.0\n"


@pytest.mark.parametrize(
    "first", ["benchmarks.scoring", "benchmarks.runners", "benchmarks.protocols", "eval.score"]
)
def test_every_protocol_is_found_by_name_whichever_module_is_imported_first(first):
    code = (
        f"import {first}\n"
        "import json, sys\n"
        "from benchmarks.protocols import PROTOCOLS, get_protocol\n"
        "before = sorted(m for m in sys.modules if m.startswith('benchmarks.protocols.') and m != 'benchmarks.protocols.base')\n"
        "names = PROTOCOLS.names()\n"
        "found = {n: type(get_protocol(n).new_runner()).__name__ for n in names}\n"
        "print(json.dumps([before, names, found]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    before, names, found = json.loads(out.stdout.splitlines()[-1])
    assert names == sorted(OURS | PUBLIC)
    assert found["p3i"] == "P3IRunner" and found["ovo"] == "OvoRunner"
    if first in (
        "benchmarks.scoring",
        "benchmarks.protocols",
    ):  # nothing imported a protocol before its first get
        assert before == []


def test_the_table_lists_every_module_that_defines_a_protocol():
    defined = sorted(
        path.stem
        for path in (ROOT / "benchmarks" / "protocols").glob("*.py")
        if re.search(r"^PROTOCOL = Protocol\(", path.read_text(), re.M)
    )
    assert defined == protocols.PROTOCOLS.names()
    for name in defined:
        assert protocols.PROTOCOLS.where(name) == f"benchmarks.protocols.{name}:PROTOCOL"


def test_our_protocols_live_in_their_modules():
    for name in sorted(OURS | PUBLIC):
        module = f"benchmarks.protocols.{name}"
        protocol = protocols.get_protocol(name)
        assert isinstance(protocol, Protocol) and protocol.name == name
        assert type(runners.get_runner(name)).__module__ == module
        assert runners.get_runner(name).protocol is protocol
        assert (protocol.official is not None) == (name in PUBLIC)
        assert (protocol.scorer is not None) == (name in OURS)
        if name in OURS:
            assert protocol.scorer.__module__ == module
    judge_label = scoring.ScoreConfig(content="exact", open_content="judge")
    assert protocols.get_protocol("egoserve").uses_judge(judge_label)
    assert not protocols.get_protocol("p3i").uses_judge(judge_label)
    assert protocols.get_protocol("p3i").uses_judge(
        scoring.ScoreConfig(content="label", open_content="judge")
    )


def test_a_name_listed_twice_or_unknown_is_refused():
    with pytest.raises(ValueError, match="protocol 'p3i' is registered twice"):
        protocols.PROTOCOLS.add("p3i", "benchmarks.protocols.egoserve:PROTOCOL")
    with pytest.raises(KeyError, match="unknown protocol 'p3j'.*did you mean 'p3i'"):
        protocols.get_protocol("p3j")
    with pytest.raises(KeyError, match="unknown protocol 'p3j'"):
        runners.get_runner("p3j")


@pytest.fixture
def fifth(tmp_path, monkeypatch):
    """The documented steps, in a temporary folder: ``fifth.py`` in a folder searched as part of
    benchmarks.protocols, its line in the table (``PROTOCOLS.add``, what the table's line does) and
    ``conf/benchmark/fifth.yaml`` in a Hydra search path; all undone afterwards."""
    folder = tmp_path / "protocols"
    folder.mkdir()
    (folder / "fifth.py").write_text(FIFTH)
    (tmp_path / "conf" / "benchmark").mkdir(parents=True)
    (tmp_path / "conf" / "benchmark" / "fifth.yaml").write_text(YAML)
    monkeypatch.setattr(protocols, "__path__", [*protocols.__path__, str(folder)])
    protocols.PROTOCOLS.add("fifth", "benchmarks.protocols.fifth:PROTOCOL")
    yield tmp_path
    protocols.PROTOCOLS.remove("fifth")
    sys.modules.pop("benchmarks.protocols.fifth", None)
    if hasattr(protocols, "fifth"):
        delattr(protocols, "fifth")


def test_a_fifth_benchmark_is_one_module_and_scores_through_the_one_api(fifth):
    assert "fifth" in protocols.PROTOCOLS.names() and "benchmarks.protocols.fifth" not in sys.modules
    g = scoring.GroundTruth
    paired = [
        (g("a", "alpha", [Target(3.0, "x")]), [Reply(4.0, "x"), Reply(9.0, "y")]),  # 4 in [3, 5]: hit
        (g("b", "alpha", [Target(10.0, "x")]), [Reply(13.0, "z")]),  # 13 > 12: miss
        (g("c", "beta", [Target(5.0, "x")]), []),  # silent: miss
        (g("d", "beta", [Target(2.0, "x")]), [Reply(2.0, "w")]),  # on time: hit
        (g("f", "beta", [Target(7.0, "x")]), [Reply(8.5, "v")]),  # hit
        (g("e", "beta", []), [Reply(1.0, "u")]),  # a negative, not in the hits
    ]
    metrics, rows = protocols.get_protocol("fifth").score(paired, scoring.ScoreConfig())
    # alpha 1 of 2 = 50; beta 2 of 3 = 66.67; all 3 of 5 = 60
    assert metrics["protocol"] == "fifth" and metrics["content"] == "label"
    assert metrics["hit"] == pytest.approx(60.0)
    assert metrics["per_task"] == {"alpha": {"hit": 50.0}, "beta": {"hit": pytest.approx(200 / 3)}}
    assert metrics["negatives"] == 1
    assert [r["hit"] for r in rows] == [True, False, False, True, True]
    runner = runners.get_runner("fifth")
    assert type(runner).__name__ == "FifthRunner"
    # the base class's table: one row per task, its number fields
    assert runner.table(metrics, rows, []) == (
        ["task", "n", "hit"],
        [["alpha", 2, 50.0], ["beta", 3, pytest.approx(200 / 3)]],
    )


def test_a_fifth_benchmark_runs_in_eval_run_from_its_yaml(fifth, tiny_checkpoint, toy_dir, tmp_path, capsys):
    out = tmp_path / "out"
    cfg = load_config(
        [
            f"hydra.searchpath=[file://{fifth / 'conf'}]",
            "benchmark=fifth",
            f"checkpoint={tiny_checkpoint}",
            f"records={toy_dir / 'records.jsonl'}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            f"paths.runs_dir={tmp_path / 'runs'}",
            f"out_dir={out}",
            "render.max_pixels=4096",
            "max_new_tokens=4",
            "threshold=0.47",  # the untrained tiny model fires on about half the steps
            "limit=3",
        ]
    )
    assert (cfg.benchmark.name, cfg.benchmark.protocol) == ("fifth", "fifth")
    metrics = evaluate(cfg)
    rows = PredictionLog(out / "predictions.jsonl").rows()
    streams = load_streams(toy_dir / "records.jsonl")[:3]
    assert [r["id"] for r in rows] == [s.id for s in streams]
    for r in rows:  # the runner keeps the first fired step's turn only
        fired = [k for k, f in enumerate(r["fired"]) if f]
        assert [x["time"] for x in r["replies"]] == [float(k) for k in fired[:1]]
    # by hand from the rows: a stream with a target is hit when its first reply is within 2 s after it
    hits = [
        bool(r["replies"]) and s.targets[0].time <= r["replies"][0]["time"] <= s.targets[0].time + 2
        for s, r in zip(streams, rows, strict=True)
        if s.targets
    ]
    assert metrics["protocol"] == "fifth" and metrics["hit"] == pytest.approx(100.0 * sum(hits) / len(hits))
    assert metrics["n"] == {"event_monitoring": 1, "object_monitoring": 1} and metrics["negatives"] == 1
    assert json.loads((out / "metrics.json").read_text()) == metrics
    capsys.readouterr()
    argv = ["--protocol", "fifth", "--gt", str(out / "gt.jsonl"), "--pred", str(out / "predictions.jsonl")]
    assert score.main(argv) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == metrics
