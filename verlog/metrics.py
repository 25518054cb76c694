"""One iteration's metrics: phase timings and the ``metrics.jsonl`` row built from what it produced.

Keys of a row (rank 0's view; ``turns`` and ``turns_per_second`` count every rank):

==================================  ===================================================================
key (prefix)                        meaning
==================================  ===================================================================
``iteration``, ``phase``, ``turns``  iteration number (1-based), ``critic_warmup`` or the algorithm,
                                    turns collected so far
``episode/*``                       episodes that finished in this batch: return, length, success,
                                    progression, truncated fraction; ``success_recent100`` over the
                                    last 100 finished episodes, ``recent_episodes`` how many that is
``task/<task>/*``                   a task mixture's tasks (:mod:`verlog.envs.mixture`), each: its
                                    episodes finished in this batch (``episodes``), their ``success``,
                                    and ``success_recent100`` over its own last 100
``rollout/*``                       invalid-reply rate, turns, replies cut at ``max_response_tokens``,
                                    response length, reward, and the largest gap between behaviour and
                                    old logprobs (0 when the engine and the actor agree)
``prompt/*``, ``env/*``             prompt lengths and trimming; environment faults and restarts
``actor/*``, ``critic/*``,          the update's losses and statistics (:mod:`verlog.update`); the
``update/*``, ``algo/*``            critic's explained variance, value and return means
``time/<phase>``                    seconds per phase; ``turns_per_second`` over their sum
==================================  ===================================================================
"""

from __future__ import annotations

import math
import time
from collections import deque
from contextlib import contextmanager
from typing import Any, Iterator

from pathlib import Path

import torch

from verlog.algos.stats import explained_variance
from verlog.batch import TurnBatch
from verlog.config import TrainConfig, to_dict
from verlog.logging import MetricLogger, recent_success_key
from verlog.rollout.records import CollectStats, EpisodeRecord

__all__ = ["PhaseTimes", "SuccessWindows", "iteration_metrics", "make_logger", "mean"]


def make_logger(cfg: TrainConfig, run_dir: Path, start_iteration: int) -> MetricLogger:
    """The run's metric logger (``metrics.jsonl``, wandb when ``logging.wandb``, TensorBoard when
    ``logging.tensorboard``, the progress bar); rank 0 only."""
    wandb_cfg = None
    if cfg.logging.wandb:
        wandb_cfg = {"project": cfg.logging.wandb_project, "mode": cfg.logging.wandb_mode, "name": cfg.name,
                     "config": to_dict(cfg)}
    return MetricLogger(run_dir, total_iterations=cfg.iterations, start_iteration=start_iteration,
                        wandb_config=wandb_cfg, progress=cfg.logging.progress, tensorboard=cfg.logging.tensorboard)


class PhaseTimes(dict):
    """Seconds spent per phase of one iteration (``{"rollout": 1.2, ...}``), in the order measured."""

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the ``with`` body as phase ``name`` (wall-clock seconds, ``time.perf_counter``)."""
        tic = time.perf_counter()
        try:
            yield
        finally:
            self[name] = time.perf_counter() - tic


def mean(xs: list[float]) -> float:
    """The mean of ``xs``, NaN for an empty list (logged as null)."""
    return float(sum(xs) / len(xs)) if xs else math.nan


class SuccessWindows:
    """The success of the last ``size`` finished episodes, overall and per task (episodes whose record
    names a task: a task mixture's), carried across iterations and checkpoints.

    Attributes:
        overall: 1.0/0.0 per episode, oldest first, at most ``size``.
        by_task: task name -> its own window, in the order tasks were first seen.
    """

    def __init__(self, size: int = 100) -> None:
        self.size = size
        self.overall: deque[float] = deque(maxlen=size)
        self.by_task: dict[str, deque[float]] = {}

    def add(self, episodes: list[EpisodeRecord]) -> None:
        """Append each episode's success to the overall window and to its task's."""
        for e in episodes:
            self.overall.append(float(e.success))
            if e.task:
                self.by_task.setdefault(e.task, deque(maxlen=self.size)).append(float(e.success))

    def state_dict(self) -> dict[str, Any]:
        """``{"recent_success": [...], "recent_success_by_task": {task: [...]}}`` (JSON types)."""
        return {"recent_success": list(self.overall),
                "recent_success_by_task": {task: list(w) for task, w in self.by_task.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (``recent_success_by_task`` may be absent: older checkpoints)."""
        self.overall.clear()
        self.overall.extend(float(x) for x in state["recent_success"])
        self.by_task = {str(task): deque((float(x) for x in w), maxlen=self.size)
                        for task, w in state.get("recent_success_by_task", {}).items()}


def task_metrics(episodes: list[EpisodeRecord], windows: SuccessWindows) -> dict[str, float]:
    """The ``task/<task>/*`` keys (see the module docstring) for every task ``windows`` has seen;
    ``success`` is NaN (logged as null) for a task with no episode finished in this batch."""
    out: dict[str, float] = {}
    for task, window in windows.by_task.items():
        done = [float(e.success) for e in episodes if e.task == task]
        out[f"task/{task}/episodes"] = len(done)
        out[f"task/{task}/success"] = mean(done)
        out[recent_success_key(task)] = mean(list(window))
    return out


def iteration_metrics(*, iteration: int, phase: str, turns_done: int, turns_all_ranks: int, batch: TurnBatch,
                      stats: CollectStats, recent_success: SuccessWindows, old_logprobs: torch.Tensor | None,
                      values: torch.Tensor | None, returns: torch.Tensor | None, update: dict[str, float],
                      times: dict[str, float]) -> dict[str, Any]:
    """The ``metrics.jsonl`` row of one iteration (see the module docstring for the keys).

    Args:
        iteration: 1-based iteration number.
        phase: ``critic_warmup`` or the algorithm's name.
        turns_done: turns collected by all ranks so far, this iteration's included.
        turns_all_ranks: turns collected by all ranks in this iteration.
        batch: this rank's batch; ``stats``: its collection statistics.
        recent_success: the success windows; this batch's finished episodes are added to them.
        old_logprobs: [T, N, R] the actor's logprobs before the update, or None when not scored.
        values, returns: [T, N, R] the critic's values and targets, or None without a critic.
        update: the update's metrics (or the reason it was skipped).
        times: seconds per phase.
    """
    mask = batch.response_mask
    real = batch.turns
    eps = stats.episodes
    recent_success.add(eps)
    valid_lp = mask & torch.isfinite(batch.behaviour_logprobs)
    old_lp = old_logprobs if old_logprobs is not None else batch.behaviour_logprobs  # not scored
    lp_diff = (batch.behaviour_logprobs - old_lp).abs()[valid_lp]
    out: dict[str, Any] = {
        "iteration": iteration,
        "phase": phase,
        "turns": turns_done,
        "episodes": len(eps),
        "episode/return": mean([e.episode_return for e in eps]),
        "episode/length": mean([e.length for e in eps]),
        "episode/success": mean([float(e.success) for e in eps]),
        "episode/progression": mean([e.progression for e in eps]),
        "episode/success_recent100": mean(list(recent_success.overall)),
        "episode/recent_episodes": len(recent_success.overall),
        "episode/truncated_fraction": mean([float(e.truncated) for e in eps]),
        "rollout/invalid_action_rate": stats.invalid_actions / max(stats.turns, 1),
        "rollout/turns": stats.turns,
        "rollout/cut_at_max_tokens_rate": float(batch.cut_at_max_tokens[real].float().mean()),
        "rollout/response_tokens_mean": float(batch.response_lengths[real].float().mean()),
        "rollout/reward_mean": float(batch.rewards[real].mean()),
        "rollout/behaviour_vs_old_logprob_max_abs": float(lp_diff.max()) if lp_diff.numel() else 0.0,
        "prompt/tokens_mean": mean(stats.prompt_tokens),
        "prompt/tokens_max": max(stats.prompt_tokens) if stats.prompt_tokens else 0,
        "prompt/trimmed_turns": stats.trimmed_turns,
        "prompt/trimmed_observation_tokens": stats.trimmed_observation_tokens,
        **({"prompt/dropped_images": stats.dropped_images} if batch.images else {}),
        "env/faults": stats.env_faults,
        "env/restarts": stats.env_restarts,
        **task_metrics(eps, recent_success),
        **update,
        **{f"time/{k}": v for k, v in times.items()},
    }
    if values is not None and returns is not None:
        out.update({
            "critic/explained_variance": explained_variance(values, returns, mask),
            "critic/values_mean": float(values[mask].mean()),
            "critic/returns_mean": float(returns[mask].mean()),
            "critic/turn_value_mean": float(values[..., 0][real].mean()),
        })
    out["turns_per_second"] = turns_all_ranks / max(sum(times.values()), 1e-9)
    return out
