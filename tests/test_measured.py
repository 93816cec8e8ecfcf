"""The measured figures are in one data file, ``engine/measured.json``: the plan (``engine.preflight``,
``python -m pipeline.plan``) reads them from it, and ``docs/performance.md`` quotes each of them
(each figure's ``quoted`` text is in the page, and holds the figure's value as written there)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine import preflight
from engine.preflight import MEASURED_FILE, measured, measured_where

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "performance.md"


def written(value: float) -> str:
    """A figure as the docs write it: thousands with commas (``8,401``), a fraction as it is (``74.5``)."""
    return f"{value:,}" if isinstance(value, int) else f"{value:,.10g}"


def misquoted(data: dict, page: str) -> list[str]:
    """Each figure of ``data`` (``engine/measured.json``'s content) whose quote is not in ``page`` (a
    Markdown text, spaces and line breaks counted alike), or does not hold the figure's value."""
    flat = " ".join(page.split())
    out = []
    for name, entry in data.items():
        if name == "about":
            continue
        for key, figure in entry["figures"].items():
            quote = " ".join(figure["quoted"].split())
            number = re.compile(rf"(?<![\d.,]){re.escape(written(figure['value']))}(?![\d,]|\.\d)")
            if not number.search(quote):
                out.append(f"{name}.{key}: {written(figure['value'])} is not in its quote {quote!r}")
            elif quote not in flat:
                out.append(f"{name}.{key}: docs/performance.md does not say {quote!r}")
    return out


def test_every_measured_figure_has_its_unit_date_device_and_source():
    data = json.loads(MEASURED_FILE.read_text(encoding="utf-8"))
    for name, entry in data.items():
        if name == "about":
            continue
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", entry["date"]) and entry["device"] and entry["source"], name
        for key, figure in entry["figures"].items():
            assert isinstance(figure["value"], int | float) and figure["unit"] and figure["quoted"], (
                name,
                key,
            )


def test_docs_performance_quotes_every_measured_figure():
    data = json.loads(MEASURED_FILE.read_text(encoding="utf-8"))
    assert misquoted(data, PAGE.read_text(encoding="utf-8")) == []


def test_the_quote_check_finds_a_changed_figure_and_a_changed_page():
    data = {
        "step": {
            "date": "2026-12-04",
            "device": "1 H200",
            "source": "make gpu-check",
            "figures": {
                "tokens_per_s": {
                    "value": 8401,
                    "unit": "tokens/s",
                    "quoted": "| sft | `sft_tokens_per_s` | 8,401 |",
                },
                "peak_gib": {"value": 39.5, "unit": "GiB", "quoted": "39.5 GiB\npeak"},
            },
        }
    }
    page = "| sft | `sft_tokens_per_s` | 8,401 |\n\nthe step peaked at 39.5 GiB\npeak.\n"
    assert misquoted(data, page) == []
    data["step"]["figures"]["tokens_per_s"]["value"] = 8400  # the file changed, the page did not
    assert misquoted(data, page) == [
        "step.tokens_per_s: 8,400 is not in its quote '| sft | `sft_tokens_per_s` | 8,401 |'"
    ]
    data["step"]["figures"]["tokens_per_s"]["value"] = 8401
    page = page.replace("39.5 GiB", "39.6 GiB")  # the page changed, the file did not
    assert misquoted(data, page) == ["step.peak_gib: docs/performance.md does not say '39.5 GiB peak'"]
    data["step"]["figures"]["peak_gib"]["value"] = 9.5  # a number inside another is not it
    assert misquoted(data, page)[0].startswith("step.peak_gib: 9.5 is not in its quote")


def test_the_plan_reads_its_figures_from_the_data_file(tmp_path):
    data = json.loads(MEASURED_FILE.read_text(encoding="utf-8"))
    for name, constant in [
        ("sft_step", preflight.H200_SFT),
        ("sft_step_checkpointed", preflight.H200_SFT_CHECKPOINTED),
        ("stream_step", preflight.H200_STREAM),
        ("grpo_update", preflight.H200_GRPO),
    ]:
        assert constant == {k: f["value"] for k, f in data[name]["figures"].items()}, name
    data["stream_step"]["figures"]["ms_per_step"]["value"] = 200
    data["stream_step"]["date"] = "2027-01-02"
    other = tmp_path / "measured.json"
    other.write_text(json.dumps(data))
    assert measured("stream_step", other) == {"ms_per_step": 200, "batch8_speedup": 5.6}
    assert (
        measured_where("stream_step", other)
        == "1 H200, bf16, 2027-01-02, make gpu-check; engine/measured.json"
    )


def test_a_plan_cites_the_measurement_it_used():
    from tests.pipeline.test_preflight import _plan_of

    rate = _plan_of("qwen3_vl_4b", "gpus=1")["tokens_per_s_per_gpu"]
    assert rate["value"] == preflight.H200_SFT_CHECKPOINTED["tokens_per_s"] == 8401
    assert rate["source"].endswith("(1 H200, bf16, 2026-12-04, make gpu-check; engine/measured.json)")


@pytest.mark.parametrize(
    "value, text", [(8401, "8,401"), (10100, "10,100"), (74.5, "74.5"), (0.798, "0.798")]
)
def test_a_figure_is_written_as_the_docs_write_it(value, text):
    assert written(value) == text
