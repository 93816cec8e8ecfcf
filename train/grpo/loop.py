"""The GRPO update loop over streaming rollouts (docs/grpo.md; ``train/grpo/algorithm.py`` for the
advantages and the loss, ``train/grpo/policy.py`` for the policy forward).

Each update: the next ``windows_per_step`` windows of a seeded shuffle are drawn (one pass over the
windows per epoch; a resumed run draws the same ones), each gets ``num_generations`` sampled streaming rollouts (each window with its own seed),
the configured weighted reward (``train.grpo.rewards.build_reward``), advantages centred within the group
(``scale_rewards``), and one loss forward with the window's frames; the update's loss weights each
generated token by ``loss_type``, gradients are clipped, and the optimizer steps. A group whose
advantages are all zero gives no gradient and is counted (``zero_std_groups``).

Processes (``train.grpo.parallel``): under ``accelerate launch`` with a DeepSpeed config each rank
rolls out its share of the draw; rewards, advantages and the loss are computed per group on its
rank, and the update equals the one-process update over the same windows (the figures in
docs/grpo.md). Every logged row is the same on every rank; rank 0 writes it.

Credit (``credit``): ``sequence`` gives every token of a rollout its rollout's advantage (GRPO as
published); ``decision`` splits each rollout's reward into per-step rewards that sum to it
(``train.grpo.rewards.step_rewards``) and normalizes each step's discounted return (``gamma``) against
the group's at the same step (``train.grpo.algorithm.decision_advantages``). Under sequence credit an
over-firing policy learns to fire less everywhere, its first, right reply included, and collapses
to silence; decision credit charges each repeat at its own step and credits the first reply.

Checkpoints (written and read by ``train.grpo.checkpoints``) are ordinary HF directories
(``checkpoint-<step>``: model + processor, safetensors) plus ``grpo_state.pt`` (the step and, for one process, the optimizer state, read back with
``torch.load(weights_only=True)`` and the step checked; under DeepSpeed each rank's optimizer
partition is in ``deepspeed/``, read back with ``weights_only=True`` too: ``train.safe_load``) and
the ``COMPLETE`` marker, written once every rank has saved. ``resume=auto`` restarts from the
newest complete one. The run control is ``infra.run_control.RunControl``, as SFT's: SIGUSR1 /
SIGTERM to any rank: after the current update every rank saves its part and stops with
``Preempted``; a non-finite loss skips the update, and ``max_nonfinite_steps`` of them in a row
stop the run with a clear error; ``time_budget_s`` stops it before the next update.

``keep_best``: every held-out evaluation (before the first update, every ``eval_every``, after the
last; on rank 0) that beats the best so far saves the weights to ``best/`` (model + processor,
then ``best.json`` with the update and its PRS-B); a resumed run reads ``best.json`` back.
"""

from __future__ import annotations

import logging
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.render import TurnRenderer
from engine.step_forward import compiled_graphs
from infra.ranks import all_reduce, broadcast, gather, shard
from infra.run_control import Preempted, RunControl
from infra.tracking import flatten
from train.grpo.algorithm import (
    ADVANTAGES,
    SCALES,
    UpdateCounts,
    grpo_loss,
    moments,
    step_advantages,
    step_returns,
    token_advantages,
    token_weights,
)
from train.grpo.checkpoints import RunFiles, best_value
from train.grpo.config import NONFINITE_MESSAGE, check_choices
from train.grpo.parallel import Single
from train.grpo.policy import PolicyBatch, policy_batch, token_logprobs
from train.grpo.rewards import step_rewards
from train.grpo.rollout import Rollout, Window, rollout_group
from train.stage_config import run_control

log = logging.getLogger(__name__)
#: Per-window sums the update's logged row adds up over windows and ranks.
SUMS = ("tokens", "clipped_sum", "ratio_sum", "kl_sum")


@dataclass
class Group:
    """One window of the update on this rank: its rollouts, rewards and advantages."""

    index: int  # position in the update's draw (its seed); -1 for a padding window
    rollouts: list[Rollout]
    rewards: list[float]
    parts: list[dict]
    advantages: list[list[float]]
    batch: PolicyBatch | None = None
    token_adv: torch.Tensor | None = None

    @property
    def live(self) -> bool:
        return self.token_adv is not None and bool(self.token_adv.abs().gt(0).any())


def device_clock(model) -> float:
    """``time.perf_counter()`` once the device has run what was queued (CUDA runs asynchronously)."""
    if next(model.parameters()).is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter()


def plan_shape(plan: list[Group]) -> dict:
    """What the update's loss forwards feed the model: forwards, rows, token positions (padding
    included), real tokens, and the positions that repeat a group's common prefix (its rows' shared
    start, counted G - 1 times: what computing it once would save)."""
    batches = [g.batch for g in plan]
    return {
        "loss_forwards": len(batches),
        "loss_rows": sum(int(b.input_ids.shape[0]) for b in batches),
        "loss_positions": sum(int(b.input_ids.numel()) for b in batches),
        "loss_tokens": sum(int(b.attention_mask.sum()) for b in batches),
        "repeated_prefix_tokens": sum(b.shared_prefix() * (int(b.input_ids.shape[0]) - 1) for b in batches),
    }


class GRPOLoop:
    """Rollouts, rewards and clipped-ratio updates; ``cfg`` is the ``grpo`` block of ``conf/grpo.yaml``,
    ``parallel`` a ``train.grpo.parallel`` runner (default: one process)."""

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
        parallel: Single | None = None,
    ):
        check_choices(cfg)  # the loop's own guard for direct callers, before any rollout
        if cfg.keep_best and not (evaluate and cfg.eval_every):
            raise ValueError(
                "grpo.keep_best needs held-out evaluations: set grpo.eval_every and grpo.eval_split"
            )
        self.cfg = cfg
        self.processor = processor
        self.renderer = renderer
        self.reward_fn = reward_fn
        self.windows = windows
        self.run_dir = Path(run_dir)
        self.ref_model = ref_model
        self.evaluate = evaluate
        self.on_log = on_log or (lambda row, step: None)
        self.parallel = parallel or Single()
        self.parallel.setup(model, cfg.learning_rate, cfg.weight_decay, cfg.max_grad_norm)
        self.model = self.parallel.module  # rollouts, evaluation, saving
        self.forward_model = self.parallel.model  # the loss forward (DeepSpeed's engine under DeepSpeed)
        self.files = RunFiles(self.run_dir, self.parallel, processor, renderer)
        self.best_dir = self.files.best_dir
        self.best: dict | None = self.files.kept_best(cfg.best_metric) if cfg.keep_best else None
        self.step = 0
        self._orders: dict[int, list[int]] = {}  # epoch -> window order (the current one only)
        self.history: list[dict] = []
        self.run: RunControl | None = None  # the run control of the last train()
        self.timing: dict = {}  # the last update's loss forwards and where its time went (python -m perf grpo)

    @property
    def optimizer(self):
        return self.parallel.optimizer

    # -- checkpoints --------------------------------------------------------------------------

    def save(self) -> Path:
        """Every rank saves its part of ``checkpoint-<step>``; rank 0 marks it complete last, unless
        the run is in a run of non-finite losses (``train.grpo.checkpoints``)."""
        healthy = not (self.run is not None and self.run.nonfinite_in_a_row)
        return self.files.save(self.step, complete=healthy, keep=self.cfg.save_total_limit)

    def load_state(self, checkpoint: str | Path) -> None:
        """Optimizer state and step of a checkpoint (``RunFiles.load_state`` checks the step)."""
        self.step = self.files.load_state(checkpoint, self.cfg.max_steps)

    # -- one update ---------------------------------------------------------------------------

    def _windows_for(self, step: int) -> list[Window]:
        """Update ``step``'s windows: the next ``windows_per_step`` of a seeded shuffle of all the
        windows, epoch after epoch (a new shuffle each pass), so ``n / windows_per_step`` updates see
        every window once (``train.steps.grpo_updates``) and a resumed run draws the same ones."""
        n = len(self.windows)
        per = min(self.cfg.windows_per_step, n)
        out = []
        for pos in range(step * per, (step + 1) * per):
            epoch, i = divmod(pos, n)
            if epoch not in self._orders:
                self._orders = {epoch: random.Random(self.cfg.seed * 1_000_003 + epoch).sample(range(n), n)}
            out.append(self.windows[self._orders[epoch][i]])
        return out

    def _seed(self, j: int) -> int:
        return (self.cfg.seed * 7919 + self.step) * 1009 + j

    def _rollouts(self, draw: list[Window]) -> list[tuple[int, list[Rollout]]]:
        """This rank's windows of the draw, rolled out; a rank without one rolls out a padding
        window (index -1), so that it can take part in the update's collectives."""
        cfg, par = self.cfg, self.parallel
        mine = shard(list(range(len(draw))), par.rank, par.world) or [-1]
        out = []
        self.model.eval()
        with par.full_weights(), par.autocast(), torch.no_grad():
            for j in mine:
                window = draw[j if j >= 0 else par.rank % len(draw)]
                seed = self._seed(j if j >= 0 else par.rank % len(draw))
                rollouts, _ = rollout_group(
                    self.model,
                    self.renderer,
                    window,
                    cfg.num_generations,
                    cfg.temperature,
                    cfg.max_new_tokens,
                    seed,
                    compile=cfg.compile_rollouts,
                    step=cfg.engine_step,
                )
                out.append((j, rollouts))
        return out

    def _scored(self, rolled: list[tuple[int, list[Rollout]]]) -> list[Group]:
        """Rewards, their parts, and the advantages of the configured estimator (``credit``) and
        scale (``scale_rewards``), from ``train.grpo.algorithm``'s registries."""
        cfg = self.cfg
        per_step = ADVANTAGES.get(cfg.credit).per_step
        groups, inputs = [], []
        for j, rollouts in rolled:
            scored = [self.reward_fn(*r.reward_input) for r in rollouts]
            groups.append(Group(j, rollouts, [float(x.value) for x in scored], [x.parts for x in scored], []))
            inputs.append(
                [step_rewards(self.reward_fn, *r.reward_input) for r in rollouts]
                if per_step
                else [[r] for r in groups[-1].rewards]
            )
        values = [
            x
            for g, rows in zip(groups, inputs, strict=True)
            if g.index >= 0
            for row in step_returns(rows, cfg.gamma)
            for x in row
        ]
        std = SCALES.get(cfg.scale_rewards)(*all_reduce(list(moments(values))))
        for g, rows in zip(groups, inputs, strict=True):
            steps = [len(r.turns) for r in g.rollouts]
            g.advantages = step_advantages(cfg.credit, rows, cfg.gamma, std, steps)
            g.batch = policy_batch(g.rollouts, self.renderer)
            g.token_adv = token_advantages(g.batch, g.advantages)
        return groups

    def update(self) -> dict:
        """One update: rollouts, rewards, the loss over this rank's groups (padded to the most any
        rank has), the optimizer step; returns the logged row."""
        cfg, par = self.cfg, self.parallel
        t0 = time.perf_counter()
        rolled = self._rollouts(self._windows_for(self.step))
        t_rollout = time.perf_counter() - t0
        groups = self._scored(rolled)
        t_reward = time.perf_counter() - t0 - t_rollout
        live, plan, counts = self._loss_plan(groups)
        self.timing = plan_shape(plan)
        total, sums, window_loss = self._backward(plan, len(live), counts)
        total, nonfinite, *summed = all_reduce(
            [total, float(not torch.isfinite(torch.tensor(total))), *sums.values()]
        )
        records = [(g.index, g.rewards, g.parts, g.index in window_loss) for g in groups if g.index >= 0]
        records = sorted(r for rank in gather(records) for r in rank)
        row = self._row(records)
        if plan:
            row.update(loss=total, **self._ratios(dict(zip(SUMS, summed, strict=True))))
            if nonfinite:
                par.discard()
                row["nonfinite"] = 1
            else:
                t_step = device_clock(self.model)
                row["grad_norm"] = par.step()
                self.timing["optimizer_s"] = device_clock(self.model) - t_step
        row.update(
            rollout_s=t_rollout, reward_s=t_reward, update_s=time.perf_counter() - t0 - t_rollout - t_reward
        )
        if cfg.compile_rollouts:
            row["rollout_graphs"] = compiled_graphs()
        return row

    def _loss_plan(self, groups: list[Group]) -> tuple[list[Group], list[Group], UpdateCounts]:
        """This rank's groups with a signal, the loss forwards it runs, and the update-wide counts
        the token weights divide by. Every rank runs as many forwards as the rank with the most
        live groups (DeepSpeed's collectives need the same calls on every rank): a rank with fewer
        pads with one of its own groups, at weight 0."""
        cfg = self.cfg
        live = [g for g in groups if g.index >= 0 and g.live]
        max_tokens = cfg.window_steps * (cfg.max_new_tokens + 2)
        n_rollouts, n_groups, n_tokens, n_max = (
            *all_reduce(
                [
                    sum(len(g.rollouts) for g in live),
                    len(live),
                    sum(int(g.batch.targets.numel()) for g in live),
                ]
            ),
            all_reduce([len(live)], "max")[0],
        )
        counts = UpdateCounts(int(n_rollouts), int(n_groups), int(n_tokens), max_tokens)
        return live, live + [groups[0]] * (int(n_max) - len(live)), counts

    def _backward(self, plan: list[Group], n_live: int, counts: UpdateCounts) -> tuple[float, dict, dict]:
        """The loss forward and backward of each planned group (the first ``n_live`` count; the rest
        are padding); returns the summed loss, the per-token sums of ``SUMS`` and each window's parts."""
        cfg, par = self.cfg, self.parallel
        total, sums, window_loss = 0.0, dict.fromkeys(SUMS, 0.0), {}
        clock = {"update_forward_s": 0.0, "update_backward_s": 0.0}
        self.model.train()
        for k, g in enumerate(plan):
            t0 = device_clock(self.model)
            with par.autocast():
                new = token_logprobs(self.forward_model, self.renderer, g.rollouts, g.batch, cfg.temperature)
                ref = None
                if cfg.beta > 0:
                    with torch.no_grad():
                        ref = token_logprobs(
                            self.ref_model, self.renderer, g.rollouts, g.batch, cfg.temperature
                        )
            weights = token_weights(g.batch, cfg.loss_type, counts) * (k < n_live)
            loss, lp = grpo_loss(
                new,
                g.batch,
                g.token_adv,
                cfg.epsilon,
                cfg.beta,
                ref,
                epsilon_high=cfg.epsilon_high,
                weights=weights,
            )
            if k < n_live:
                total += float(loss.detach())
                window_loss[g.index] = lp
                for key in SUMS:
                    sums[key] += lp[key]
            t1 = device_clock(self.model)
            par.backward(loss * par.world, last=k == len(plan) - 1)  # the ranks' gradients are averaged
            t2 = device_clock(self.model)
            clock["update_forward_s"] += t1 - t0
            clock["update_backward_s"] += t2 - t1
        self.model.eval()
        self.timing.update(clock)
        return total, sums, window_loss

    @staticmethod
    def _row(records: list[tuple]) -> dict:
        """The logged row of an update from every window's (index, rewards, parts, had signal)."""
        flat = [x for _, rewards, _, _ in records for x in rewards]
        parts = [p for _, _, ps, _ in records for p in ps]
        row = {
            "reward/mean": sum(flat) / len(flat),
            "reward/group_std": sum(statistics.pstdev(r) for _, r, _, _ in records) / len(records),
            "zero_std_groups": sum(not live for *_, live in records),
        }
        for key in sorted({k for p in parts for k in p}):
            vals = [float(p[key]) for p in parts if key in p]
            row[f"reward/{key}"] = sum(vals) / len(vals)
        return row

    @staticmethod
    def _ratios(sums: dict) -> dict:
        n = max(sums["tokens"], 1.0)
        return {
            "clip_fraction": sums["clipped_sum"] / n,
            "ratio_mean": sums["ratio_sum"] / n,
            "kl": sums["kl_sum"] / n,
            "generated_tokens": int(sums["tokens"]),
        }

    # -- the loop -----------------------------------------------------------------------------

    def train(self, run: RunControl | None = None) -> Path:
        """Updates from ``self.step`` to ``max_steps`` (or the time budget); returns the last
        checkpoint. ``run`` is the stage's run control, made before the model loaded (else one is
        made here from ``cfg``); a signal to any rank saves a checkpoint on every rank after the
        current update and raises :class:`Preempted`."""
        cfg, par = self.cfg, self.parallel
        self.run = run or run_control(cfg, "grpo", "update", NONFINITE_MESSAGE)
        self.run.begin(cfg.max_steps, self.step)
        try:
            if self.evaluate and self.step == 0 and cfg.eval_every:
                self._log_eval()
            while self.step < cfg.max_steps:
                if self.run.over_budget(self.step, cfg.max_steps):
                    log.warning(
                        "time budget of %ss reached: stopping at update %d of %d",
                        cfg.time_budget_s,
                        self.step,
                        cfg.max_steps,
                    )
                    break
                row = self.update()
                self.run.check_loss(not row.get("nonfinite"), self.step)
                self.step += 1
                self.history.append({"step": self.step, **row})
                if par.is_main:
                    self.on_log(row, self.step)
                if self.evaluate and cfg.eval_every and self.step % cfg.eval_every == 0:
                    self._log_eval()
                self.run.advance(1, reward=row["reward/mean"], **self._last_eval())
                if self.run.signalled():  # every rank stops at the same update
                    raise Preempted(self.save(), cfg.requeue_exit_code)
                if cfg.save_every and self.step % cfg.save_every == 0:
                    self.save()
            if cfg.keep_best and not (self.history and "eval" in self.history[-1]):
                self._log_eval()  # the last update is a candidate too
            return self.save()
        finally:
            if run is None:
                self.run.finish()
            else:
                self.run.close_bar()

    @property
    def stopped_by(self) -> str | None:
        """Why the last :meth:`train` ended: ``max_steps``, ``time_budget`` or ``signal``."""
        return self.run.stopped_by if self.run is not None else None

    def _last_eval(self) -> dict:
        for h in reversed(self.history):
            if "eval" in h:
                return {self.cfg.best_metric: best_value(h["eval"], self.cfg.best_metric)}
        return {}

    def _log_eval(self) -> None:
        """Rank 0 evaluates (under ZeRO-3 with the weights gathered on every rank); all ranks get
        the metrics and agree on the best."""
        par = self.parallel
        with par.full_weights(), par.autocast(), torch.no_grad():
            metrics = self.evaluate(self.model) if par.is_main else None
        metrics = broadcast(metrics)
        self.history.append({"step": self.step, "eval": metrics})
        if par.is_main:
            self.on_log(flatten(metrics, "eval"), self.step)
        if self.cfg.keep_best:
            score = best_value(metrics, self.cfg.best_metric)
            if self.best is None or score > self.best["value"]:
                self._save_best({"step": self.step, "metric": self.cfg.best_metric, "value": score})

    def _save_best(self, best: dict) -> None:
        self.files.save_best(best)
        self.best = best
