"""``python -m eval.score``: P3I, ProPerMem and EgoServe (stream records and release formats), errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from eval.score import main

ROOT = Path(__file__).resolve().parents[2]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_json(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def run(capsys, *argv: str) -> tuple[int, dict | None, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    last = out.strip().splitlines()[-1] if out.strip() else None
    return code, (json.loads(last) if last else None), err


def tgt(t, label="Warning", **kw):
    return {"time": t, "content": "danger ahead", "label": label, **kw}


@pytest.fixture
def p3i_files(tmp_path):
    gt = write_jsonl(
        tmp_path / "gt.jsonl",
        [
            {"id": "a", "task": "accident_warning", "targets": [tgt(10.0), tgt(30.0)]},
            {"id": "b", "task": "accident_warning", "targets": [tgt(10.0)]},
            {"id": "c", "task": "event_monitoring", "targets": [tgt(5.0)]},
            {"id": "n", "task": "event_monitoring", "targets": []},
        ],
    )
    pred = write_jsonl(
        tmp_path / "pred.jsonl",
        [
            {"id": "a", "replies": [{"time": t, "text": "Warning!"} for t in (5.0, 12.0, 13.0, 29.0)]},
            {"id": "b", "replies": [{"time": 10.0, "text": "[safety] Warning, slow down"}]},
            {"id": "c", "replies": [{"time": 7.0, "text": "nothing to see"}]},
            {"id": "n", "replies": []},
        ],
    )
    return gt, pred


def test_p3i_numbers_and_per_sample(capsys, tmp_path, p3i_files):
    gt, pred = p3i_files
    code, res, _ = run(
        capsys,
        "--protocol",
        "p3i",
        "--gt",
        str(gt),
        "--pred",
        str(pred),
        "--content",
        "label",
        "--per-sample",
        str(tmp_path / "ps.jsonl"),
    )
    assert code == 0
    a_u = math.exp(-0.1) / 4 / 2
    a_b = (math.exp(-0.1) / 3 + math.exp(-0.05)) / 2
    assert res["per_task"]["accident_warning"]["prs_u"] == pytest.approx(100 * (a_u + 1.0) / 2, abs=1e-9)
    assert res["per_task"]["accident_warning"]["prs_b"] == pytest.approx(100 * (a_b + 1.0) / 2, abs=1e-9)
    assert res["per_task"]["event_monitoring"]["prs_b"] == 0.0  # label missing from the reply
    assert res["prs_b"] == pytest.approx(100 * (a_b + 1.0) / 4, abs=1e-9)
    assert res["micro"]["prs_b"] == pytest.approx(100 * (a_b + 1.0) / 3, abs=1e-9)
    assert res["negatives"] == {"n": 1, "silent": 100.0}
    rows = [json.loads(x) for x in (tmp_path / "ps.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["a", "b", "c", "n"]
    assert rows[0]["prs_u"] == pytest.approx(a_u, abs=1e-12)
    code, res_any, _ = run(
        capsys, "--protocol", "p3i", "--gt", str(gt), "--pred", str(pred), "--content", "any"
    )
    assert res_any["per_task"]["event_monitoring"]["prs_b"] == pytest.approx(100 * math.exp(-0.1))


def test_module_entry_point_prints_json_last(p3i_files):
    gt, pred = p3i_files
    proc = subprocess.run(
        [sys.executable, "-m", "eval.score", "--protocol", "p3i", "--gt", str(gt), "--pred", str(pred)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert set(json.loads(proc.stdout.strip().splitlines()[-1])) >= {
        "prs_u",
        "prs_b",
        "prs_u_prime",
        "prs_b_prime",
        "micro",
        "per_task",
    }


def test_propermem_cli(capsys, tmp_path):
    w = {"window": [30.0, 40.0], "content": "take your pills", "label": "pills"}
    gt = write_jsonl(
        tmp_path / "gt.jsonl",
        [
            {"id": "p1", "task": "propermem", "targets": [w]},
            {"id": "p2", "task": "propermem", "targets": [w]},
            {"id": "n1", "task": "propermem", "targets": []},
        ],
    )
    pred = write_jsonl(
        tmp_path / "pred.jsonl",
        [
            {"id": "p1", "replies": [{"time": 42.0, "text": "Remember your pills."}]},
            {"id": "p2", "replies": [{"time": t, "text": "Pills!"} for t in (32.0, 34.0, 36.0)]},
            {"id": "n1", "replies": [{"time": 5.0, "text": "Pills?"}]},
        ],
    )
    code, res, _ = run(
        capsys,
        "--protocol",
        "propermem",
        "--gt",
        str(gt),
        "--pred",
        str(pred),
        "--per-sample",
        str(tmp_path / "ps.jsonl"),
    )
    assert code == 0
    assert (res["perfect_pos"], res["perfect_neg"], res["hit"], res["over_trigger"], res["false_fire"]) == (
        50.0,
        0.0,
        100.0,
        50.0,
        100.0,
    )
    assert res["perfect"] == pytest.approx(100 / 3) and res["mean_fires"] == pytest.approx(5 / 3)
    rows = {r["id"]: r for r in map(json.loads, (tmp_path / "ps.jsonl").read_text().splitlines())}
    assert rows["p1"] == {"id": "p1", "perfect": True, "hit": True, "early": 0, "late": 0, "fires": 1}


# ---------------------------------------------------------------------------------------------
# EgoServe on stream records (the release files: test_egoserve_official.py, test_egoserve_layouts.py)


def counts(res):
    return {k: (v["matched"], v["n_pred"], v["n_gt"]) for k, v in res["per_subtype"].items()}


def test_egoserve_stream_records_and_tolerance_override(capsys, tmp_path):
    gt = write_jsonl(
        tmp_path / "gt.jsonl",
        [
            {
                "id": "vid",
                "task": "egoserve",
                "source": "holoassist",
                "targets": [
                    {"window": [10.0, 12.0], "content": "careful", "category": "safety"},
                    {"time": 50.0, "content": "use tongs", "category": "tool_use"},
                ],
            }
        ],
    )
    pred = write_jsonl(
        tmp_path / "pred.jsonl",
        [
            {
                "id": "vid",
                "replies": [
                    {"time": 22.0, "text": "[safety] Careful!"},
                    {"time": 50.0, "text": "Tongs.", "category": "safety"},
                ],
            }
        ],
    )
    code, res, _ = run(capsys, "--protocol", "egoserve", "--gt", str(gt), "--pred", str(pred))
    assert counts(res) == {"safety": (1, 2, 1), "tool_use": (0, 0, 1)}
    code, res, _ = run(
        capsys, "--protocol", "egoserve", "--gt", str(gt), "--pred", str(pred), "--tolerance", "9.9"
    )
    assert counts(res)["safety"] == (0, 2, 1)


# ---------------------------------------------------------------------------------------------
# Bad input: the file, the record and the reason; exit 2


def test_unknown_prediction_id_fails(capsys, tmp_path, p3i_files):
    gt, _ = p3i_files
    pred = write_jsonl(tmp_path / "bad.jsonl", [{"id": "a", "replies": []}, {"id": "zzz", "replies": []}])
    code, res, err = run(capsys, "--protocol", "p3i", "--gt", str(gt), "--pred", str(pred))
    assert code == 2 and res is None
    assert str(pred) in err and "record zzz" in err and "not in the ground truth" in err


def test_reply_without_time_fails(capsys, tmp_path, p3i_files):
    gt, _ = p3i_files
    pred = write_jsonl(tmp_path / "bad.jsonl", [{"id": "a", "replies": [{"text": "Warning"}]}])
    code, _, err = run(capsys, "--protocol", "p3i", "--gt", str(gt), "--pred", str(pred))
    assert code == 2
    assert str(pred) in err and "record a" in err and "replies[0].time" in err and "missing" in err


def test_missing_prediction_fails_unless_allowed(capsys, tmp_path, p3i_files):
    gt, _ = p3i_files
    pred = write_jsonl(tmp_path / "part.jsonl", [{"id": "a", "replies": []}])
    code, _, err = run(capsys, "--protocol", "p3i", "--gt", str(gt), "--pred", str(pred))
    assert code == 2 and "record b" in err and "no prediction" in err
    code, res, _ = run(capsys, "--protocol", "p3i", "--gt", str(gt), "--pred", str(pred), "--allow-missing")
    assert code == 0 and res["micro"]["prs_b"] == 0.0


def test_unknown_subtype_and_untagged_reply_fail(capsys, tmp_path):
    gt = write_jsonl(
        tmp_path / "gt.jsonl",
        [
            {
                "id": "v",
                "task": "egoserve",
                "source": "holoassist",
                "targets": [{"time": 5.0, "content": "x", "category": "safety"}],
            }
        ],
    )
    pred = write_jsonl(tmp_path / "pred.jsonl", [{"id": "v", "replies": [{"time": 5.0, "text": "no tag"}]}])
    code, _, err = run(capsys, "--protocol", "egoserve", "--gt", str(gt), "--pred", str(pred))
    assert code == 2 and "record v" in err and "no subtype" in err


def test_a_field_given_twice_in_a_prediction_line_is_refused_naming_the_file_line_and_key(
    capsys, tmp_path, p3i_files
):
    """``replies`` twice on one line, the second empty: a JSON reader keeps ``[]``, so ``a`` was
    scored as silent."""
    gt, pred = p3i_files
    lines = pred.read_text().splitlines()
    lines[0] = lines[0][:-1] + ', "replies": []}'
    pred.write_text("\n".join(lines) + "\n")
    code, res, err = run(capsys, "--protocol", "p3i", "--gt", str(gt), "--pred", str(pred))
    assert code == 2 and res is None
    assert f"file {pred}, record line 1: key 'replies' is given twice in one JSON object" in err, err
