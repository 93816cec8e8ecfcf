"""The GRPO update loop over streaming rollouts (see ``train/grpo_loss.py`` for why it is not trl's).

Each update: ``windows_per_step`` windows are drawn (seeded by the step, so a resumed run draws the
same ones), each gets ``group_size`` sampled streaming rollouts, the configured weighted reward
(``rewards.grpo.build_reward``), group-normalized advantages, and one loss forward with the
window's frames; gradients are averaged over the windows, clipped, and the optimizer steps. A group
whose advantages are all zero gives no gradient and is counted (``zero_std_groups``).

Credit (``credit``): ``sequence`` gives every token of a rollout its rollout's advantage (GRPO as
published); ``decision`` splits each rollout's reward into per-step rewards that sum to it
(``rewards.grpo.step_rewards``) and normalizes each step's discounted return (``gamma``) against
the group's at the same step (``train.rollout.decision_advantages``). Under sequence credit an
over-firing policy learns to fire less everywhere, its first, right reply included, and collapses
to silence; decision credit charges each repeat at its own step and credits the first reply.

Checkpoints are ordinary HF directories (``checkpoint-<step>``: model + processor, safetensors)
plus ``grpo_state.pt`` (optimizer state and step, read back with ``torch.load(weights_only=True)``)
and the ``COMPLETE`` marker; ``resume=auto`` restarts from the newest complete one. SIGUSR1 /
SIGTERM save a checkpoint after the current update and stop with ``Preempted``; a non-finite loss
skips the update, and ``max_nonfinite_steps`` of them in a row stop the run with a clear error.

``keep_best``: every held-out evaluation (before the first update, every ``eval_every``, after the
last) that beats the best so far saves the weights to ``best/`` (model + processor, then
``best.json`` with the update and its PRS-B); a resumed run reads ``best.json`` back.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from data_builders.progress import Progress
from eval.checkpoints import COMPLETE_MARKER, write_render
from eval.render import TurnRenderer
from eval.tracking import flatten
from rewards.grpo import step_rewards
from train.grpo_loss import grpo_loss, policy_batch, token_advantages, token_logprobs
from train.rollout import Rollout, Window, decision_advantages, group_advantages, rollout_group
from train.run_dir import (
    CheckpointWriteError,
    NonFiniteLoss,
    Preempted,
    SignalFlag,
    is_write_failure,
    rotate_checkpoints,
)

log = logging.getLogger(__name__)
STATE_FILE = "grpo_state.pt"
BEST_DIR, BEST_FILE = "best", "best.json"
CREDITS = ("sequence", "decision")


class GRPOLoop:
    """Rollouts, rewards and clipped-ratio updates; ``cfg`` is the ``grpo`` block of ``conf/grpo.yaml``."""

    def __init__(
        self,
        cfg,
        model,
        processor,
        renderer: TurnRenderer,
        reward_fn,
        windows: list[Window],
        run_dir: str | Path,
        ref_model=None,
        evaluate: Callable[[object], dict] | None = None,
        on_log: Callable[[dict, int], None] | None = None,
    ):
        self.cfg = cfg
        self.model = model
        self.processor = processor
        self.renderer = renderer
        self.reward_fn = reward_fn
        self.windows = windows
        self.run_dir = Path(run_dir)
        self.ref_model = ref_model
        self.evaluate = evaluate
        self.on_log = on_log or (lambda row, step: None)
        if cfg.credit not in CREDITS:
            raise ValueError(f"grpo.credit must be one of {CREDITS}, got {cfg.credit!r}")
        if cfg.keep_best and not (evaluate and cfg.eval_every):
            raise ValueError(
                "grpo.keep_best needs held-out evaluations: set grpo.eval_every and grpo.eval_split"
            )
        self.best_dir = self.run_dir / BEST_DIR
        tmp = self.best_dir.with_name(f"{BEST_DIR}.tmp")
        if cfg.keep_best and not self.best_dir.exists() and (tmp / BEST_FILE).exists():  # crashed mid-swap
            tmp.rename(self.best_dir)
        best = self.best_dir / BEST_FILE
        self.best: dict | None = json.loads(best.read_text()) if cfg.keep_best and best.exists() else None
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
        self.step = 0
        self.history: list[dict] = []
        self.nonfinite = 0  # updates in a row with a non-finite loss
        self.stopped_by: str | None = None  # why the last train() ended: max_steps, time_budget, signal

    # -- checkpoints --------------------------------------------------------------------------

    def save(self) -> Path:
        path = self.run_dir / f"checkpoint-{self.step}"
        try:
            path.mkdir(parents=True, exist_ok=True)
            self.model.save_pretrained(path, safe_serialization=True)
            self.processor.save_pretrained(path)
            write_render(path, self.renderer.cfg)
            torch.save({"optimizer": self.optimizer.state_dict(), "step": self.step}, path / STATE_FILE)
        except (OSError, RuntimeError) as exc:
            if not is_write_failure(exc):
                raise
            raise CheckpointWriteError(path, exc) from exc
        if self.nonfinite:
            log.warning("%s saved during a run of non-finite losses: not marked complete", path)
            return path
        (path / COMPLETE_MARKER).write_text(f"{self.step}\n")
        rotate_checkpoints(self.run_dir, self.cfg.save_total_limit)
        return path

    def load_state(self, checkpoint: str | Path) -> None:
        """Optimizer state and step of a checkpoint (the weights were loaded with the model)."""
        state = torch.load(Path(checkpoint) / STATE_FILE, weights_only=True)
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])

    # -- one update ---------------------------------------------------------------------------

    def _windows_for(self, step: int) -> list[Window]:
        rng = random.Random(self.cfg.seed * 1_000_003 + step)
        return rng.sample(self.windows, min(self.cfg.windows_per_step, len(self.windows)))

    def _reward(self, rollouts: list[Rollout]) -> tuple[list[float], list[dict], list[list[float]]]:
        """Rewards, their parts, and the advantages under the configured credit, per rollout and step."""
        cols = {
            "targets": [[t.to_dict() for t in r.window.targets] for r in rollouts],
            "task": [r.window.stream.task for r in rollouts],
        }
        turns = [r.turns for r in rollouts]
        rewards = [float(x) for x in self.reward_fn(turns, **cols)]
        parts = list(self.reward_fn.last_parts)
        if self.cfg.credit == "decision":
            advantages = decision_advantages(step_rewards(self.reward_fn, turns, **cols), self.cfg.gamma)
        else:
            advantages = [[a] * len(t) for a, t in zip(group_advantages(rewards), turns, strict=True)]
        return rewards, parts, advantages

    def update(self) -> dict:
        cfg = self.cfg
        t0 = time.perf_counter()
        groups = []
        self.model.eval()
        for j, window in enumerate(self._windows_for(self.step)):
            seed = (cfg.seed * 7919 + self.step) * 1009 + j
            with torch.no_grad():
                rollouts, _ = rollout_group(
                    self.model,
                    self.renderer,
                    window,
                    cfg.group_size,
                    cfg.temperature,
                    cfg.max_new_tokens,
                    seed,
                )
            groups.append(rollouts)
        t_rollout = time.perf_counter() - t0
        rewards, parts, stds, advantages = [], [], [], []
        for rollouts in groups:
            r, p, a = self._reward(rollouts)
            rewards.append(r)
            parts += p
            stds.append(statistics.pstdev(r))
            advantages.append(a)
        t_reward = time.perf_counter() - t0 - t_rollout
        loss_parts = []
        total = 0.0
        live = []
        for rollouts, adv in zip(groups, advantages, strict=True):
            batch = policy_batch(rollouts, self.renderer)
            token_adv = token_advantages(batch, adv)
            if bool(token_adv.abs().gt(0).any()):
                live.append((rollouts, batch, token_adv))
        for rollouts, batch, adv in live:
            new = token_logprobs(self.model, self.renderer, rollouts, batch, cfg.temperature)
            ref = None
            if cfg.beta > 0:
                with torch.no_grad():
                    ref = token_logprobs(self.ref_model, self.renderer, rollouts, batch, cfg.temperature)
            loss, lp = grpo_loss(new, batch, adv, cfg.clip_eps, cfg.beta, ref)
            loss_parts.append(lp)
            total += float(loss.detach())
            (loss / len(live)).backward()
        row = self._row(rewards, parts, stds, loss_parts, len(groups) - len(live))
        if live and not torch.isfinite(torch.tensor(total)):
            self.optimizer.zero_grad(set_to_none=True)
            row["nonfinite"] = 1
        elif live:
            row["grad_norm"] = float(
                torch.nn.utils.clip_grad_norm_(
                    [p for p in self.model.parameters() if p.requires_grad], cfg.max_grad_norm
                )
            )
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        row.update(
            rollout_s=t_rollout, reward_s=t_reward, update_s=time.perf_counter() - t0 - t_rollout - t_reward
        )
        return row

    @staticmethod
    def _row(rewards, parts, stds, loss_parts, zero_std) -> dict:
        flat = [x for r in rewards for x in r]
        row = {
            "reward/mean": sum(flat) / len(flat),
            "reward/group_std": sum(stds) / len(stds),
            "zero_std_groups": zero_std,
        }
        for key in sorted({k for p in parts for k in p}):
            vals = [float(p[key]) for p in parts if key in p]
            row[f"reward/{key}"] = sum(vals) / len(vals)
        for key in ("loss", "clip_fraction", "kl", "ratio_mean"):
            if loss_parts:
                row[key] = sum(lp[key] for lp in loss_parts) / len(loss_parts)
        return row

    # -- the loop -----------------------------------------------------------------------------

    def train(self, signals: SignalFlag | None = None) -> Path:
        """Updates from ``self.step`` to ``max_steps`` (or the time budget); returns the last
        checkpoint. ``signals`` is the stage's flag, installed before the model loaded (else one is
        installed here); a signal saves a checkpoint after the current update and raises
        :class:`Preempted`."""
        cfg = self.cfg
        flag = signals or SignalFlag()
        start = time.perf_counter()
        bar = Progress(cfg.max_steps, "grpo", unit="update", initial=self.step)
        self.stopped_by = "max_steps"
        try:
            if self.evaluate and self.step == 0 and cfg.eval_every:
                self._log_eval()
            while self.step < cfg.max_steps:
                if cfg.time_budget_s and time.perf_counter() - start > cfg.time_budget_s:
                    log.warning(
                        "time budget of %ss reached: stopping at update %d of %d",
                        cfg.time_budget_s,
                        self.step,
                        cfg.max_steps,
                    )
                    self.stopped_by = "time_budget"
                    break
                row = self.update()
                self.nonfinite = self.nonfinite + 1 if row.get("nonfinite") else 0
                if self.nonfinite >= cfg.max_nonfinite_steps:
                    raise NonFiniteLoss(
                        f"{self.nonfinite} updates in a row had a non-finite loss (last at update "
                        f"{self.step}); stopping. Lower the learning rate or check the data."
                    )
                self.step += 1
                self.history.append({"step": self.step, **row})
                self.on_log(row, self.step)
                if self.evaluate and cfg.eval_every and self.step % cfg.eval_every == 0:
                    self._log_eval()
                bar.update(1, reward=row["reward/mean"], **self._last_eval())
                if flag.received is not None:
                    self.stopped_by = "signal"
                    raise Preempted(self.save(), cfg.requeue_exit_code)
                if cfg.save_every and self.step % cfg.save_every == 0:
                    self.save()
            if cfg.keep_best and not (self.history and "eval" in self.history[-1]):
                self._log_eval()  # the last update is a candidate too
            return self.save()
        finally:
            bar.close()
            if signals is None:
                flag.restore()

    def _last_eval(self) -> dict:
        for h in reversed(self.history):
            if "eval" in h:
                return {"prs_b": h["eval"]["with_negatives"]["prs_b"]}
        return {}

    def _log_eval(self) -> None:
        metrics = self.evaluate(self.model)
        self.history.append({"step": self.step, "eval": metrics})
        self.on_log(flatten(metrics, "eval"), self.step)
        if self.cfg.keep_best:
            score = float(metrics["with_negatives"]["prs_b"])
            if self.best is None or score > self.best["prs_b"]:
                self._save_best({"step": self.step, "prs_b": score})

    def _save_best(self, best: dict) -> None:
        """Weights to ``best.tmp``, then swapped in for ``best`` (a crash leaves one whole copy)."""
        path, tmp = self.best_dir, self.best_dir.with_name(f"{BEST_DIR}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.model.save_pretrained(tmp, safe_serialization=True)
        self.processor.save_pretrained(tmp)
        write_render(tmp, self.renderer.cfg)
        (tmp / BEST_FILE).write_text(json.dumps(best) + "\n")
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
        self.best = best
        log.info("best held-out PRS-B so far: %.2f at update %d", best["prs_b"], best["step"])
