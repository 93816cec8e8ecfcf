"""The LLM judge (rated as the official EgoServe judge rates) and its HTTP client (a total deadline,
bounded retries for transient failures only, 401/403/404 fail fast, unrated pairs counted) against
servers on 127.0.0.1 (real sockets); the judge settings of ``eval.run``."""

from __future__ import annotations

import json
import time

import pytest

from benchmarks.scoring import get_content_scorer
from benchmarks.scoring.judge import Judge, parse_rating
from infra.chat_client import ChatClient, ChatError, ChatFatal, ChatUnavailable
from metrics.content import TargetText, Unscorable
from metrics.egoserve import ServiceEvent


def scripted(script: dict[str, list[str]]):
    """An answer function: the first script key found in the prompt gives the next of its answers
    (the last one repeats)."""
    script = {k: list(v) for k, v in script.items()}

    def answer(prompt: str) -> str:
        key = next(k for k in script if k in prompt)
        return script[key].pop(0) if len(script[key]) > 1 else script[key][0]

    return answer


def http_reply(status: str, body: bytes, length: int | None = None) -> bytes:
    n = len(body) if length is None else length
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {n}\r\n\r\n".encode() + body
    )


def chat_body(text: str) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()


def test_parse_rating_as_the_official_judge():
    # the first "<Name>: <integer>" anywhere, any case, capped at 5; 0 stays 0; bold markup does not read
    assert parse_rating("Rationality: 4\nJustification: close to the reference.", "Rationality") == 4
    assert parse_rating("My rating. rationality:3 and later Rationality: 5", "Rationality") == 3
    assert parse_rating("Effectiveness: 9", "Effectiveness") == 5
    assert parse_rating("Effectiveness: 0", "Effectiveness") == 0
    assert parse_rating("Effectiveness: 4.5", "Effectiveness") == 4
    assert parse_rating("**Rationality:** 4", "Rationality") is None
    assert parse_rating(None, "Rationality") is None


def pairs():
    # (dataset, gt, prediction): two rated pairs on HoloAssist, one on EgoLife, one with an empty
    # predicted message (never sent), one whose Rationality answer does not parse (not asked again)
    return [
        (
            "holoassist",
            ServiceEvent("v", "safety", 0, 1, "careful, hot pan"),
            ServiceEvent("v", "safety", 0, 0, "Pan is hot!"),
        ),
        (
            "holoassist",
            ServiceEvent("v", "tool_use", 5, 6, "grab the tongs"),
            ServiceEvent("v", "tool_use", 5, 5, "Tongs."),
        ),
        (
            "egolife",
            ServiceEvent("A1_JAKE", "memory_recall", 9, 9, "keys on the table"),
            ServiceEvent("A1_JAKE", "memory_recall", 9, 9, "Your keys?"),
        ),
        (
            "egolife",
            ServiceEvent("A1_JAKE", "safety", 20, 21, "knife edge"),
            ServiceEvent("A1_JAKE", "safety", 20, 20, "   "),
        ),
        (
            "captaincook4d",
            ServiceEvent("1_7", "error_recovery", 3, 4, "undo that"),
            ServiceEvent("1_7", "error_recovery", 3, 3, "Redo."),
        ),
    ]


def test_judge_rates_pairs_as_the_official_judge_and_caches(tmp_path, monkeypatch, chat_server):
    monkeypatch.setenv("TEST_JUDGE_KEY", "sk-local-test")
    script = {
        "Rate RATIONALITY": ["Rationality: 4"],
        "Rate EFFECTIVENESS": ["Effectiveness: 2\nJustification: vague."],
    }

    def answer(prompt: str) -> str:
        if "Reference message: undo that" in prompt and "Rate RATIONALITY" in prompt:
            return "I would say four."  # unparsable: the pair is unrated, the question not repeated
        if "Reference message: grab the tongs" in prompt:
            return "Rationality: 2" if "Rate RATIONALITY" in prompt else "Effectiveness: 5"
        return scripted(script)(prompt)

    cache = tmp_path / "judge.sqlite"
    with chat_server(answer) as server:
        judge = Judge(
            backend="http",
            cache_path=cache,
            base_url=server.url,
            model="tiny-judge",
            key_env="TEST_JUDGE_KEY",
        )
        res = judge.rate_pairs(pairs())
        # 4 pairs sent x 2 prompts (the empty message is never sent; nothing is asked twice)
        assert len(server.requests) == 8
        assert all(r["temperature"] == 0 and r["model"] == "tiny-judge" for r in server.requests)
        assert server.headers[0]["Authorization"] == "Bearer sk-local-test"
        first = server.prompts[0]
        assert (
            "Reference service type: Instant / safety" in first
            and "Assistant service type: Instant / safety" in first
        )
        assert "Reference message: careful, hot pan" in first and "Assistant message: Pan is hot!" in first
        # rated: (4, 2), (2, 5), (4, 2) -> R 10/3, E 3, overall (10/3 + 3) / 2
        assert res["n"] == 3 and res["rationality"] == 10 / 3 and res["effectiveness"] == 3.0
        assert res["overall"] == (10 / 3 + 3.0) / 2
        assert res["per_dataset"] == {
            "HoloAssist": {"rationality": 3.0, "effectiveness": 3.5, "overall": 3.25, "n": 2},
            "EgoLife": {"rationality": 4.0, "effectiveness": 2.0, "overall": 3.0, "n": 1},
        }
        assert (res["pairs"], res["skipped_empty_message"], res["unrated"], res["unparsable"]) == (5, 1, 1, 1)
        again = Judge(
            backend="http",
            cache_path=cache,
            base_url=server.url,
            model="tiny-judge",
            key_env="TEST_JUDGE_KEY",
        )
        assert again.rate_pairs(pairs()) == {**res, "requests": 0, "cache_hits": 8}
        assert len(server.requests) == 8  # the second run sent nothing

        scorer = get_content_scorer(
            "judge", backend="http", cache_path=cache, base_url=server.url, model="tiny-judge"
        )
        assert scorer("Pan is hot!", TargetText("careful, hot pan", category="safety")) == pytest.approx(0.75)


def test_content_scorer_counts_a_pair_it_cannot_rate(tmp_path, chat_server):
    with chat_server(lambda p: "no rating here") as server:
        scorer = get_content_scorer(
            "judge", backend="http", cache_path=tmp_path / "c.sqlite", base_url=server.url, model="m"
        )
        with pytest.raises(Unscorable):
            scorer("Keys?", TargetText("keys on the table", category="memory_recall"))


def test_a_dripping_server_is_cut_at_the_total_deadline(raw_server):
    # one byte every 0.3 s: each socket read succeeds, so only a total deadline stops it. timeout 1 s,
    # 3 tries, backoff 0.5 + 1 s -> about 4.5 s, then the endpoint is down and costs nothing more.
    def drip(conn, n, stop):
        for b in http_reply("200 OK", chat_body("Rationality: 5")):
            if stop.is_set():
                return
            conn.sendall(bytes([b]))
            time.sleep(0.3)

    with raw_server(drip) as server:
        client = ChatClient(server.url, "m", timeout_s=1.0)
        t0 = time.monotonic()
        with pytest.raises(ChatUnavailable, match="no answer after 3 tries"):
            client.complete("hello")
        assert time.monotonic() - t0 < 6.0 and server.connections == 3
        t0 = time.monotonic()
        with pytest.raises(ChatUnavailable, match="is down"):
            client.complete("hello again")
        assert time.monotonic() - t0 < 0.1 and server.connections == 3


@pytest.mark.parametrize("status", ["401 Unauthorized", "403 Forbidden", "404 Not Found"])
def test_401_403_404_fail_at_once_with_the_status(raw_server, status):
    with raw_server(lambda conn, n, stop: conn.sendall(http_reply(status, b'{"error": "no"}'))) as server:
        with pytest.raises(ChatFatal, match=f"HTTP {status}"):
            ChatClient(server.url, "m", key_env="NO_SUCH_KEY_VAR").complete("hello")
        assert server.connections == 1


@pytest.mark.parametrize(
    ("reply", "connections"),
    [
        (http_reply("200 OK", b"[1, 2, 3]"), 1),  # a JSON list: not a chat completion, not retried
        (http_reply("200 OK", b'{"choices": []}'), 1),
        (http_reply("400 Bad Request", b"{}"), 1),
        (http_reply("200 OK", b'{"choices": [{"mess', length=200), 3),  # a short body: retried
        (b"HELLO THERE\r\n\r\n", 3),  # a bad status line: retried
        (http_reply("503 Service Unavailable", b"{}"), 3),
    ],
)
def test_bad_replies_raise_a_chat_error_after_bounded_tries(raw_server, reply, connections):
    with raw_server(lambda conn, n, stop: conn.sendall(reply)) as server:
        client = ChatClient(server.url, "m", timeout_s=2.0, backoff_s=0.05)
        with pytest.raises(ChatError) as info:
            client.complete("hello")
        assert not isinstance(info.value, ChatFatal) and server.connections == connections


def test_a_transient_failure_is_retried_then_answered(raw_server):
    def flaky(conn, n, stop):
        conn.sendall(
            http_reply("503 Service Unavailable", b"{}") if n == 1 else http_reply("200 OK", chat_body("ok"))
        )

    with raw_server(flaky) as server:
        assert ChatClient(server.url, "m", backoff_s=0.05).complete("hello") == "ok"
        assert server.connections == 2


def release_with_two_pairs(tree):
    """Two matched HoloAssist pairs (safety, tool_use) with messages."""
    tree.holo_event("v", "instant", "safety", "10-12", text="careful, hot pan")
    tree.holo_event("v", "instant", "tool_use", "30-32", text="grab the tongs")
    services = [
        tree.service("Safety", "DAY1 00:00:11-00:00:11", "Pan is hot!"),
        tree.service("Tool Use", "DAY1 00:00:31-00:00:31", "Tongs."),
    ]
    return tree.pred("holoassist", "v", tree.entry(*services)).write()


def test_eval_score_with_a_hanging_or_refusing_judge(tree, egoserve, capsys, raw_server, tmp_path):
    from eval.score import main

    release_with_two_pairs(tree)
    judge = ["--content", "judge", "--judge-model", "m", "--judge-cache", str(tmp_path / "j.sqlite")]

    def drip(conn, n, stop):
        for b in http_reply("200 OK", chat_body("Rationality: 5")):
            if stop.is_set():
                return
            conn.sendall(bytes([b]))
            time.sleep(0.5)

    with raw_server(drip) as server:
        t0 = time.monotonic()
        res, err = egoserve(
            *tree.args("holoassist"), *judge, "--judge-url", server.url, "--judge-timeout", "1"
        )
        assert time.monotonic() - t0 < 10.0 and server.connections == 3  # one request's tries, then down
    assert res["unrated"] == 2 and res["judge"]["n"] == 0 and res["judge"]["endpoint_down"]
    assert res["per_subtype"]["safety"]["matched"] == 1  # detection is reported all the same

    with raw_server(lambda conn, n, stop: conn.sendall(http_reply("401 Unauthorized", b"{}"))) as server:
        code = main(["--protocol", "egoserve", *tree.args("holoassist"), *judge, "--judge-url", server.url])
        assert code == 2 and server.connections == 1
    assert "HTTP 401 Unauthorized" in capsys.readouterr().err

    base = ["--protocol", "egoserve", *tree.args("holoassist"), "--content", "judge"]
    for extra, message in (
        (["--judge-model", "m"], "set --judge-url"),
        (["--judge-url", "http://127.0.0.1:9/v1"], "set --judge-model"),
        (
            ["--judge-model", "m", "--judge-url", "http://127.0.0.1:9/v1", "--judge-timeout", "0"],
            "--judge-timeout must",
        ),
    ):
        assert main([*base, *extra]) == 2
        assert message in capsys.readouterr().err


def test_eval_score_rates_the_official_matched_pairs(tree, egoserve, chat_server, tmp_path):
    release_with_two_pairs(tree)
    script = {"Rate RATIONALITY": ["Rationality: 5"], "Rate EFFECTIVENESS": ["Effectiveness: 3"]}
    with chat_server(scripted(script)) as server:
        judge = ["--content", "judge", "--judge-url", server.url, "--judge-model", "m"]
        res, _ = egoserve(*tree.args("holoassist"), *judge, "--judge-cache", str(tmp_path / "j.sqlite"))
        assert len(server.requests) == 4  # two matched pairs, two rubrics each
    assert (
        res["judge"]["rationality"] == 5
        and res["judge"]["effectiveness"] == 3
        and res["judge"]["overall"] == 4
    )
    assert res["judge"]["per_dataset"]["HoloAssist"]["n"] == 2 and res["unrated"] == 0


def test_memory_http_backend_falls_back_and_stops_asking_a_dead_endpoint(raw_server):
    from engine.memory.backends import get_backend

    def hang(conn, n, stop):
        stop.wait(3)

    with raw_server(hang) as server:
        backend = get_backend("http", base_url=server.url, model="m", timeout_s=0.5)
        backend.client.backoff_s = 0.05
        t0 = time.monotonic()
        summary = backend.summarize(["I put the keys in the drawer."], "segment")
        backend.extract("Marco is my landlord.")
        assert time.monotonic() - t0 < 3.0 and server.connections == 3
    assert summary.startswith("segment of 1 parts") and backend.request_errors == 2 and backend.fallbacks == 2
    with raw_server(lambda conn, n, stop: conn.sendall(http_reply("403 Forbidden", b"{}"))) as server:
        with pytest.raises(ChatFatal, match="403"):
            get_backend("http", base_url=server.url, model="m").summarize(["x"], "segment")


def test_eval_run_checks_the_judge_settings_before_streaming(tmp_path):
    from benchmarks.config import BenchmarkConfig
    from benchmarks.runners import get_runner
    from eval.run import evaluate, load_config

    bench = BenchmarkConfig(name="egoserve", protocol="egoserve", content="any", open_content="judge")
    with pytest.raises(ValueError, match="benchmark.judge_url"):
        get_runner("egoserve").check(BenchmarkConfig(**{**vars(bench), "judge_model": "m"}))
    with pytest.raises(ValueError, match="benchmark.judge_model"):
        get_runner("egoserve").check(bench)
    ok = BenchmarkConfig(
        **{**vars(bench), "judge_model": "m", "judge_url": "http://127.0.0.1:9/v1", "judge_timeout": 5.0}
    )
    get_runner("egoserve").check(ok)
    settings = get_runner("egoserve").settings(ok)
    assert (settings.judge_url, settings.judge_model, settings.judge_timeout) == (
        "http://127.0.0.1:9/v1",
        "m",
        5.0,
    )
    get_runner("p3i").check(BenchmarkConfig())  # no judge, nothing to check
    # through eval.run: the records do not exist, so failing on the judge proves it fails first
    cfg = load_config(
        ["benchmark=egoserve", "benchmark.open_content=judge", f"records={tmp_path / 'none.jsonl'}"]
    )
    with pytest.raises(ValueError, match="benchmark egoserve scores with the LLM judge"):
        evaluate(cfg, echo=False)


def test_the_answer_cache_is_kept_per_endpoint_model_and_settings(tmp_path, chat_server):
    # two servers with the same model name and different judgements, one cache file: each server's
    # own ratings are reported, and a cached answer is only reused for the same endpoint and model
    lenient = {"Rate RATIONALITY": ["Rationality: 5"], "Rate EFFECTIVENESS": ["Effectiveness: 4"]}
    strict = {"Rate RATIONALITY": ["Rationality: 1"], "Rate EFFECTIVENESS": ["Effectiveness: 2"]}
    cache = tmp_path / "judge.sqlite"

    def judge(server, model="tiny-judge", **extra):
        return Judge(backend="http", cache_path=cache, base_url=server.url, model=model, **extra)

    with chat_server(scripted(lenient)) as a, chat_server(scripted(strict)) as b:
        first = judge(a).rate_pairs(pairs())
        assert (first["rationality"], first["effectiveness"], first["requests"]) == (5.0, 4.0, 8)
        second = judge(b).rate_pairs(pairs())
        assert len(b.requests) == 8 and second["cache_hits"] == 0
        assert (second["rationality"], second["effectiveness"], second["n"]) == (1.0, 2.0, 4)
        other_model = judge(a, model="bigger-judge").rate_pairs(pairs())
        assert len(a.requests) == 16 and {r["model"] for r in a.requests[8:]} == {"bigger-judge"}
        assert other_model["cache_hits"] == 0
        shorter = judge(a, max_tokens=8).rate_pairs(pairs())  # a reply cap can change the answer
        assert len(a.requests) == 24 and shorter["cache_hits"] == 0
        again = judge(b).rate_pairs(pairs())  # the same endpoint and model: all from the cache
        assert again == {**second, "requests": 0, "cache_hits": 8}
        assert len(b.requests) == 8
