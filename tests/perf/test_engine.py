"""perf on small sizes: the JSON contract, and the figures that do not depend on the machine."""

from __future__ import annotations

import json

import pytest

from perf import engine as bench


@pytest.mark.slow  # the engine bench end to end, 3 eval.run processes among it (40 s loaded)
def test_bench_prints_one_json_object_with_every_figure(capsys):
    result = bench.main(
        ["--steps", "8,24", "--window-at", "12,30", "--window", "6", "--batch", "3", "--repeats", "1"]
        + ["--long-steps", "none"]  # the long-stream figure: tests/eval/test_long_stream.py
        + ["--probe-steps", "40", "--probes", "4", "--probe-tokens", "4", "--ranks", "4,12,1"]
        + ["--static-steps", "30", "--static-window", "4"]
    )
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
    assert set(result["engine_vs_naive"]) == {"8", "24"} and all(
        r > 0 for r in result["engine_vs_naive"].values()
    )
    assert result["window_step30_vs_step12"] > 0 and result["batched_vs_sequential"] > 0
    mem = result["memory"]
    # a bounded window keeps the cache flat; without one it grows with the steps
    assert mem["window_step30"]["cache_tokens"] <= 1.1 * mem["window_step12"]["cache_tokens"]
    assert mem["no_window_step30"]["cache_tokens"] > 2 * mem["no_window_step12"]["cache_tokens"]
    assert mem["no_window_step30"]["kv_cache_bytes"] > mem["window_step30"]["kv_cache_bytes"]
    # the engine's own host work per step (the figure is the bench command's to report, not a limit here)
    host = result["host_ms_per_step"]
    assert set(host) == {"batch1", "batch3"} and all(set(v) == {"12", "30"} for v in host.values())
    assert all(0 < ms < 1000 for v in host.values() for ms in v.values())
    # 4 probes on 40 steps: the reruns prefill 10 + 20 + 30 + 40 steps, the branched pass 40
    assert result["probe_answers_identical"] is True and result["probe_branch_vs_rerun"] > 1
    assert set(result["probe_wall_s"]) == {"branch", "rerun"}
    # eval.run over 2 ranks vs 1 on 4 records: a rate each side, the merged predictions the one rank's
    assert result["eval_ranks_speedup"] > 0 and result["eval_ranks_identical"] is True
    assert all(r > 0 for r in result["eval_ranks_records_per_s"].values())
    assert result["eval_ranks_shard_records"] == [2, 2]  # each rank streamed its share
    assert result["eval_ranks_setup"] == {"ranks": 2, "records": 4, "steps": 12, "threads": 1, "pairs": 1}
    # the same shares streamed by 2 independent processes: a rate, and the job's rate over it
    assert result["eval_independent_records_per_s"] > 0 and result["eval_ranks_vs_independent"] > 0
    assert result["eval_ranks_vs_independent_pairs"] == [result["eval_ranks_vs_independent"]]
    # the compiled static step over a windowed stream at batch 1 and 3: no break, no recompile, one
    # frame-step graph per batch (silent at 0.5), no device read in a silent step; the eager decisions
    assert (result["graph_breaks"], result["recompiles"], result["syncs_per_silent_step"]) == (0, 0, 0)
    assert result["graphs"] == 2 and result["eager_syncs_per_silent_step"] > 0
    cases = result["static_cases"]
    assert [(c["rows"], c["steps"]) for c in cases.values()] == [(1, 30), (3, 30)]
    assert all(c["same_decisions"] and c["max_decision_logit_diff"] < 1e-4 for c in cases.values())
    # frames prepared in torch equal the processor's; both paths timed
    assert result["frame_prep_max_diff"] == 0.0 and result["frame_prep_grids_equal"] is True
    assert set(result["frame_prep_ms_per_frame"]) == {"tiny", "qwen3_vl_4b"}
    # the vision tower's call: nothing read back, the features transformers' own
    assert result["syncs_per_vision_call"] == 0
    assert all(d <= 1e-6 for d in result["vision_max_diff"].values())
    # the CPU goals read back from the figures above, each with whether it held in this run
    goals = result["cpu_goals"]
    assert set(goals) == set(bench.CPU_GOALS)
    assert goals["host_ms_per_step"]["figure"] == max(result["host_ms_per_step"]["batch1"].values())
    assert goals["window"]["figure"] == result["window_step30_vs_step12"]
    assert goals["graph_breaks"] == {"figure": 0, "max": 0, "held": True}
    assert result["cpu_goals_held"] == all(g["held"] for g in goals.values())


def test_the_cpu_goals_hold_only_when_every_figure_is_measured_and_within_its_bound():
    figures = {
        "graph_breaks": 0,
        "recompiles": 0,
        "syncs_per_silent_step": 0,
        "syncs_per_vision_call": 0,
        "frame_prep_max_diff": 0.0,
        "host_ms_per_step": {"batch1": {"60": 0.08, "480": 0.09}, "batch8": {"60": 0.4, "480": 0.5}},
        "window_step480_vs_step60": 1.05,
        "eval_ranks_vs_independent": 0.93,
    }
    held = bench.goals_held(figures, "window_step480_vs_step60")
    assert held["cpu_goals_held"] is True and held["cpu_goals"]["host_ms_per_step"]["figure"] == 0.09
    slow = figures | {"host_ms_per_step": {"batch1": {"60": 0.08, "480": 0.101}}}
    missed = bench.goals_held(slow, "window_step480_vs_step60")
    assert missed["cpu_goals_held"] is False
    assert [n for n, g in missed["cpu_goals"].items() if not g["held"]] == ["host_ms_per_step"]
    skipped = {k: v for k, v in figures.items() if k != "eval_ranks_vs_independent"}  # --ranks none
    unmeasured = bench.goals_held(skipped, "window_step480_vs_step60")
    assert unmeasured["cpu_goals"]["eval_ranks_vs_independent"] == {"figure": None, "min": 0.9, "held": False}
    assert unmeasured["cpu_goals_held"] is False


def test_frame_prep_bench_reports_the_difference_and_both_paths(capsys):
    from perf import frame_prep

    result = frame_prep.main(["--frames", "2", "--repeats", "1", "--vocab", "4096"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
    assert result["frame_prep_max_diff"] == 0.0 and result["frame_prep_grids_equal"] is True
    for model, ms in result["frame_prep_ms_per_frame"].items():
        assert set(ms) == {"host", "device"} and all(v > 0 for v in ms.values()), model
    # uint8 frames up instead of float32 patches each repeated over 2 temporal slots: 8x fewer bytes
    assert result["frame_prep_upload_bytes_per_frame"]["qwen3_vl_4b"] == {
        "host": 320 * 608 * 3 * 2 * 4,
        "device": 336 * 597 * 3,
    }
    # resizing in float32 (a GPU's uint8 kernel) would move pixel values by more than 1e-6
    assert result["frame_prep_float_resize_max_diff"] > 1e-3
    assert set(result["reply_draw_ms_per_row"]) == {"multinomial", "race"}


def test_kv_bench_prints_both_appends_and_both_attentions(capsys):
    from perf import kv

    result = kv.main(["--tokens", "256,4096", "--attention-tokens", "512", "--repeats", "1"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
    # Qwen3-VL-4B: keys and values of 8 heads x 128 in bf16, over 36 layers
    assert result["kv_bytes_per_token"] == 2 * 8 * 128 * 2 * 36
    for tokens in ("256", "4096"):
        figures = result[tokens]
        assert figures["concat_ms_per_step"] > 0 and figures["in_place_ms_per_step"] > 0
        assert figures["in_place_mb_moved"] == round(220 * 2 * 8 * 128 * 2 * 36 / 2**20, 1)
    assert result["4096"]["concat_mb_moved"] > 10 * result["4096"]["in_place_mb_moved"]
    attention = result["attention_512"]
    assert attention["sdpa_ms_per_layer"] > 0 and attention["folded_ms_per_layer"] > 0
    # transformers' SDPA writes the 32 query heads' keys and values; folding, the mask 4 times
    assert attention["sdpa_mb_written"] == round(2 * 32 * 128 * 512 * 2 * 36 / 2**20, 1)
    assert attention["folded_mb_written"] == round(4 * 220 * 512 / 2**20, 1)
