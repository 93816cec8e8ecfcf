"""The LLM judge against a local OpenAI-compatible HTTP server (real sockets on 127.0.0.1)."""

from __future__ import annotations

import json

import pytest

from eval.judge import Judge, parse_rating
from rewards.content import TargetText, Unscorable, get_content_scorer
from rewards.egoserve import ServiceEvent


def scripted(script: dict[str, list[str]]):
    """An answer function: the first script key found in the prompt gives the next of its answers
    (the last one repeats)."""
    script = {k: list(v) for k, v in script.items()}

    def answer(prompt: str) -> str:
        key = next(k for k in script if k in prompt)
        return script[key].pop(0) if len(script[key]) > 1 else script[key][0]

    return answer


def test_parse_rating_is_strict():
    assert parse_rating("  Effectiveness: 5  ", "Effectiveness") == 5
    assert parse_rating("Effectiveness: 5/5", "Effectiveness") is None
    assert parse_rating("Effectiveness: 6", "Effectiveness") is None
    assert parse_rating("Rationality: 3", "Effectiveness") is None


def test_judge_retry_malformed_and_cache(tmp_path, monkeypatch, chat_server):
    monkeypatch.setenv("TEST_JUDGE_KEY", "sk-local-test")
    script = {
        "Reference message: careful, hot pan": ["I would say four.", "Rationality: 4"],  # retry succeeds
        "Reference message: keys on the table": ["Rationality: maybe"],  # never parses
        "Effectiveness from 1 to 5": ["Effectiveness: 5"],
    }
    pairs = [
        (
            ServiceEvent("v", "safety", 0, 1, "careful, hot pan"),
            ServiceEvent("v", "safety", 0, 0, "Pan is hot!"),
        ),
        (
            ServiceEvent("v", "memory_recall", 0, 1, "keys on the table"),
            ServiceEvent("v", "memory_recall", 0, 0, "Keys?"),
        ),
    ]
    cache = tmp_path / "judge.sqlite"
    with chat_server(scripted(script)) as server:
        judge = Judge(
            backend="http",
            cache_path=cache,
            base_url=server.url,
            model="tiny-judge",
            key_env="TEST_JUDGE_KEY",
        )
        res = judge.rate_pairs(pairs)
        # pair 1: R 2 tries + E 1; pair 2: R 3 tries (all malformed) + E 1
        assert len(server.requests) == 7
        assert res["rationality"] == 4 and res["effectiveness"] == 5 and res["mean"] == 4.5
        assert res["pairs_rated"] == 1 and res["pairs_unparsable"] == 1 and judge.unparsable == 1
        assert all(r["temperature"] == 0 and r["model"] == "tiny-judge" for r in server.requests)
        assert server.headers[0]["Authorization"] == "Bearer sk-local-test"

        again = Judge(
            backend="http",
            cache_path=cache,
            base_url=server.url,
            model="tiny-judge",
            key_env="TEST_JUDGE_KEY",
        )
        assert again.rate_pairs(pairs) == {**res, "requests": 0, "cache_hits": 7}
        assert len(server.requests) == 7  # the second run sent nothing

        scorer = get_content_scorer(
            "judge",
            backend="http",
            cache_path=cache,
            base_url=server.url,
            model="tiny-judge",
            key_env="TEST_JUDGE_KEY",
        )
        assert scorer("Pan is hot!", TargetText("careful, hot pan", category="safety")) == pytest.approx(0.75)
        with pytest.raises(Unscorable):
            scorer("Keys?", TargetText("keys on the table", category="memory_recall"))


def test_judge_counts_a_dead_endpoint_as_unparsable(tmp_path, chat_server):
    with chat_server(scripted({"": ["Rationality: 3"]})) as server:
        url = server.url
    judge = Judge(backend="http", cache_path=tmp_path / "c.sqlite", base_url=url, model="m", timeout_s=2.0)
    assert judge.rationality("a", "safety", "b", "safety") is None
    assert judge.errors == 3 and judge.unparsable == 1


def test_eval_score_egoserve_runs_the_judge_on_matched_pairs(tmp_path, capsys, chat_server):
    from eval.score import main

    gt = tmp_path / "gt.jsonl"
    gt.write_text(
        json.dumps(
            {
                "id": "vid",
                "task": "egoserve",
                "source": "holoassist",
                "targets": [
                    {"window": [10.0, 12.0], "content": "careful, hot pan", "category": "safety"},
                    {"time": 80.0, "content": "grab the tongs", "category": "tool_use"},
                ],
            }
        )
        + "\n"
    )
    pred = tmp_path / "pred.jsonl"
    pred.write_text(
        json.dumps({"id": "vid", "replies": [{"time": 11.0, "text": "[safety] Pan is hot!"}]}) + "\n"
    )
    script = {
        "Reference message: careful, hot pan": ["Rationality: 5"],
        "Effectiveness from": ["Effectiveness: 3"],
    }
    with chat_server(scripted(script)) as server:
        argv = ["--protocol", "egoserve", "--gt", str(gt), "--pred", str(pred), "--content", "judge"]
        argv += ["--judge-url", server.url, "--judge-model", "m", "--judge-cache", str(tmp_path / "j.sqlite")]
        assert main(argv) == 0
        res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert len(server.requests) == 2  # one matched pair, two rubrics
    assert (
        res["judge"]["rationality"] == 5 and res["judge"]["effectiveness"] == 3 and res["judge"]["mean"] == 4
    )
    assert res["per_subtype"]["safety"]["matched"] == 1 and res["per_subtype"]["tool_use"]["n_gt"] == 1
