"""The accelerator benchmark runs end to end on the tiny model on CPU (so it cannot rot between GPU runs)."""

from __future__ import annotations

from eval.bench.gpu import main


def test_bench_gpu_on_tiny_cpu(capsys):
    out = main(
        [
            "--model",
            "conf/model/tiny.yaml",
            "--device",
            "cpu",
            "--size",
            "64",
            "--steps",
            "6",
            "--stream-steps",
            "8",
            "--batch",
            "2",
            "--window-steps",
            "40",
            "--repeats",
            "1",
        ]
    )
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith('{"model": "tiny"')
    assert out["frame_tokens"] == 4
    assert out["sft"]["tokens"] > 6 * 4 and out["sft"]["step_s"] > 0
    stream = out["stream"]
    assert stream["same_decisions"] and stream["fires"] == 0
    assert stream["steps"] == 8 and stream["window_steps"] == 40
