"""The whole pipeline on the tiny model and toy videos, on CPU.

    python -m train.demo            (or: make demo)

1. Build toy stream records and their mp4 clips (``source=toy``).
2. Build (or reuse) the tiny Qwen3-VL checkpoint.
3. Render one stream into the model's turn format and print what the model sees.
4. Run the untrained model over that stream step by step, as the causal protocol does, and print
   its decision at every step.
"""

from __future__ import annotations

import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from data_builders.records import write_jsonl
from data_builders.toy import generate_toy
from data_builders.video import FrameCache
from eval.naive import NaiveStreamer
from train.config import DemoConfig, quiet_libraries, validate
from train.model import count_parameters, load_model_and_processor
from train.render import RenderConfig, TurnRenderer, stream_frames


def run_demo(cfg: DictConfig) -> dict:
    quiet_libraries()
    t0 = time.time()
    run_dir = Path(cfg.paths.runs_dir) / cfg.run_name
    data_dir = run_dir / "data"
    streams = generate_toy(data_dir, n=cfg.demo.n_streams, seed=cfg.demo.seed)
    write_jsonl(data_dir / "records.jsonl", streams)
    n_neg = sum(s.is_negative for s in streams)
    print(f"[1/4] toy data: {len(streams)} streams ({n_neg} negatives) in {data_dir}")

    model, processor = load_model_and_processor(cfg.model, cache_dir=cfg.paths.cache_dir)
    model.eval()
    params = count_parameters(model)
    print(f"[2/4] model {cfg.model.name}: {params['total']:,} parameters, {params['trainable']:,} trainable")

    render_cfg = RenderConfig(**cfg.render)
    renderer = TurnRenderer(processor, render_cfg)
    stream = streams[cfg.demo.show_stream]
    frames = stream_frames(stream, data_dir / stream.video, render_cfg, FrameCache(cfg.paths.frame_cache_dir))
    rendered = renderer.render(stream, frames)
    n_image = int((rendered.input_ids == renderer.image_pad_id).sum())
    print(
        f"[3/4] stream {stream.id} ({stream.task}): {len(rendered.step_times)} steps, "
        f"{rendered.input_ids.numel()} tokens ({n_image} image tokens); targets at "
        f"{[t.time for t in stream.targets]} s"
    )
    print("      first turns: " + processor.tokenizer.decode(rendered.input_ids[:40]).replace("\n", "\\n"))

    result = NaiveStreamer(model, renderer, threshold=cfg.demo.threshold).run(stream, frames)
    print(f"[4/4] untrained model, step by step (threshold {cfg.demo.threshold}):")
    print("      step  time  P(response)  decision")
    for s in result.steps:
        print(f"      {s.step:4d} {s.time:5.1f}  {s.p_response:11.3f}  {s.text[:60]}")
    fires = sum(s.fired for s in result.steps)
    print(f"demo finished in {time.time() - t0:.1f} s: {fires} fires over {len(result.steps)} steps")
    return {"fires": fires, "steps": len(result.steps)}


@hydra.main(config_path="../conf", config_name="demo", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_demo(validate(cfg, DemoConfig))


if __name__ == "__main__":
    main()
