"""The policy and value update of one iteration: epochs x minibatches of optimizer steps.

Each epoch shuffles the M training rows (one per real turn) and splits them into ``ppo.minibatches``
minibatches; each minibatch is one optimizer step of the actor (unless frozen by the critic
warm-up or an early stop on ``ppo.target_kl``) and, for algorithms with a critic, one of the critic.
A step runs its micro-batches (:mod:`verlog.microbatch`), back-propagating each loss
(:mod:`verlog.algos.objectives`) and applying the step at the last one. One routine,
:func:`optimizer_step`, serves both engines.

A step whose loss or gradient norm is not finite is skipped by DeepSpeed's ZeRO optimizer (weights
and optimizer state untouched); :class:`SkippedSteps` counts such steps, in total and in a row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Optional

import torch

from verlog import distributed as D
from verlog.advantages import Advantages
from verlog.algos.objectives import actor_loss, critic_loss
from verlog.algos.registry import AlgorithmSpec
from verlog.batch import TurnBatch
from verlog.config import PPOConfig
from verlog.microbatch import MicroBatches, by_row_count, by_token_budget
from verlog.scoring import Rows, Scores, critic_outputs, policy_outputs, turn_positions

__all__ = ["MetricSums", "SkippedSteps", "TrainingRows", "micro_batches", "optimizer_step", "update"]

#: A micro-batch's loss: row indices -> (loss to back-propagate, whether it counts as finite,
#: a callback that records its metrics, called only when it is finite).
LossFn = Callable[[torch.Tensor], tuple[torch.Tensor, bool, Callable[[], None]]]


@dataclass(frozen=True)
class TrainingRows:
    """The M training rows of an update and their per-token targets (R response-token slots).

    Attributes:
        rows: the packed turns (:func:`~verlog.scoring.turn_rows`).
        mask: [M, R] bool, the response tokens.
        old_logprobs, advantages: [M, R] float32.
        ref_logprobs: [M, R] float32, or None without a KL term.
        old_values, returns: [M, R] float32, or None without a critic.
    """

    rows: Rows
    mask: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    ref_logprobs: Optional[torch.Tensor] = None
    old_values: Optional[torch.Tensor] = None
    returns: Optional[torch.Tensor] = None

    @staticmethod
    def of(batch: TurnBatch, rows: Rows, scores: Scores, adv: Advantages) -> "TrainingRows":
        """The real turns of a scored batch with their advantages, in :func:`~verlog.scoring.turn_positions` order."""
        pos = turn_positions(batch)
        flat = lambda x: x.flatten(0, 1)[pos] if x is not None else None  # noqa: E731
        return TrainingRows(rows, flat(batch.response_mask), flat(scores.old_logprobs), flat(adv.advantages),
                            flat(scores.ref_logprobs), flat(scores.values), flat(adv.returns))

    def targets_on(self, device: torch.device | str) -> "TrainingRows":
        """These rows with every per-token target ([M, R] tensors) on ``device``; ``rows`` stay where they
        are (each micro-batch's inputs are moved by :func:`~verlog.scoring.forward_rows`).

        Scoring leaves its outputs on the CPU; the losses meet them with the model's outputs, which are on
        the engine's device (a CUDA GPU under DeepSpeed on a GPU machine).
        """
        moved = {f.name: getattr(self, f.name).to(device) for f in fields(self)
                 if f.name != "rows" and getattr(self, f.name) is not None}
        return replace(self, **moved)


class MetricSums:
    """Weighted sums of metrics over micro-batches; :meth:`means` gives the weighted averages."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}

    def add(self, key: str, value: float, weight: float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + value * weight
        self.weights[key] = self.weights.get(key, 0.0) + weight

    def means(self) -> dict[str, float]:
        return {k: self.sums[k] / self.weights[k] for k in self.sums if self.weights[k] > 0}


class SkippedSteps:
    """Optimizer steps skipped for non-finite values: in total, and in a row per engine.

    Args:
        zero_stage: the engines' ZeRO stage (named in the error below).
        counts: counts to continue from (a resumed run), ``{"total", "actor", "critic"}``.
    """

    def __init__(self, zero_stage: int, counts: dict[str, int] | None = None) -> None:
        self.zero_stage = zero_stage
        self.counts = {"total": 0, "actor": 0, "critic": 0, **(counts or {})}

    def consecutive(self) -> int:
        """The longest current run of skipped steps of one engine (actor or critic)."""
        return max(self.counts["actor"], self.counts["critic"])

    def after_step(self, engine: Any, name: str, losses_finite: bool) -> bool:
        """Account for one optimizer step (a minibatch boundary); True when it was applied.

        Raises:
            RuntimeError: the engine applied a step despite a non-finite loss or gradient norm
                (an optimizer without DeepSpeed's overflow check, e.g. ``deepspeed.zero_stage=0``).
        """
        applied = bool(engine.was_step_applied())
        norm = engine.get_global_grad_norm()  # None where the optimizer does not report it (ZeRO-0)
        norm_finite = norm is None or math.isfinite(float(norm))
        if applied and not (losses_finite and norm_finite):
            raise RuntimeError(f"{name}: DeepSpeed applied an optimizer step with a non-finite loss or gradient "
                               f"norm (zero_stage={self.zero_stage} does not skip it); use deepspeed.zero_stage 1-3")
        if applied:
            self.counts[name] = 0
        else:
            self.counts["total"] += 1
            self.counts[name] += 1
            print(f"{name}: optimizer step skipped (non-finite loss or gradient norm); "
                  f"{self.counts[name]} in a row, {self.counts['total']} in total", flush=True)
        return applied


def micro_batches(idx: torch.Tensor, lengths: torch.Tensor, cfg: PPOConfig) -> MicroBatches:
    """Split a minibatch's row indices into micro-batches, as many on every rank.

    By ``ppo.micro_batch_tokens`` (length-sorted, :func:`~verlog.microbatch.by_token_budget`) or by
    ``ppo.micro_batch_size`` rows. With ZeRO-2 the engines communicate on every backward, so all
    ranks must run the same number of micro-batches; a rank with fewer runs empty ones (zero loss).
    """
    if cfg.micro_batch_tokens:
        mbs = by_token_budget(idx, lengths, cfg.micro_batch_tokens)
    else:
        mbs = by_row_count(idx, lengths, cfg.micro_batch_size)
    count = int(D.max_over_ranks(len(mbs.batches)))
    mbs.batches += [idx[:0]] * (count - len(mbs.batches))
    return mbs


def optimizer_step(engine: Any, micro: list[torch.Tensor], loss_fn: LossFn, pad_id: int) -> bool:
    """One optimizer step of ``engine`` over the micro-batches ``micro`` (row indices each).

    Each micro-batch's loss is back-propagated (a non-finite one too: its non-finite gradients make
    DeepSpeed skip the whole step); the step applies at the last micro-batch. An empty micro-batch
    back-propagates a zero loss through every parameter (ZeRO-2 needs every rank to take part).

    Returns:
        Whether every micro-batch's loss was finite.
    """
    finite = True
    for i, mi in enumerate(micro):
        boundary = i == len(micro) - 1
        if mi.numel() == 0:
            _backward(engine, _zero_loss(engine, pad_id), boundary)
            continue
        loss, loss_finite, record = loss_fn(mi)
        finite = finite and loss_finite
        _backward(engine, loss, boundary)
        if loss_finite:
            record()
    return finite


def _zero_loss(engine: Any, pad_id: int) -> torch.Tensor:
    """A zero loss through every parameter (one pad token), for an empty micro-batch."""
    ids = torch.full((1, 1), pad_id, dtype=torch.long, device=D.device())
    return engine(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.sum() * 0.0


def _backward(engine: Any, loss: torch.Tensor, boundary: bool) -> None:
    """One micro-batch backward; the optimizer step applies at the minibatch's last one."""
    engine.set_gradient_accumulation_boundary(boundary)
    engine.backward(loss, scale_wrt_gas=False)
    engine.step()


def _grad_norm(engine: Any) -> float:
    norm = engine.get_global_grad_norm()
    return float(norm) if norm is not None else math.nan


def update(data: TrainingRows, *, actor: Any, critic: Any, spec: AlgorithmSpec, cfg: PPOConfig, aggregation: str,
           rng: torch.Generator, skipped: SkippedSteps, train_actor: bool, pad_id: int,
           temperature: float = 1.0) -> dict[str, float]:
    """Epochs over minibatches of the training rows; returns token-weighted averages of the metrics.

    The loss of a minibatch is normalised by its valid tokens (token-mean) or sequences (seq-mean
    aggregations, :func:`~verlog.algos.losses.aggregate_loss`).

    Args:
        data: the rows and their targets (the targets are moved to the engines' device, :meth:`TrainingRows.targets_on`).
        actor, critic: the DeepSpeed engines (``critic`` None for algorithms without one).
        spec: the algorithm's table entry (its policy loss).
        cfg: the ``ppo`` config section.
        aggregation: the policy loss's aggregation.
        rng: the update's shuffling stream.
        skipped: the skipped-step counts, updated in place.
        train_actor: False during the critic warm-up (the actor takes no step).
        pad_id: the tokenizer's padding id.
        temperature: the policy's temperature (logprobs and entropy of softmax(logits / temperature)), the
            one the batch was sampled and scored at.
    """
    data = data.targets_on(D.device())
    rows, mask = data.rows, data.mask
    M = len(rows)
    kl_loss_on = cfg.kl_coef > 0 and not cfg.kl_in_reward
    seq_norm = aggregation != "token-mean"
    row_lengths = rows.attention_mask.sum(-1)
    metrics = MetricSums()
    add = metrics.add
    actor.train()
    if critic is not None:
        critic.train()
    actor_stopped = not train_actor
    skipped_here = 0
    for _epoch in range(cfg.epochs):
        perm = torch.randperm(M, generator=rng)
        for idx in perm.tensor_split(cfg.minibatches):
            n_tok = max(float(mask[idx].sum()), 1.0)
            norm = max(float(mask[idx].any(-1).sum()), 1.0) if seq_norm else n_tok  # what the loss averages over
            mbs = micro_batches(idx, row_lengths, cfg)
            add("update/padding_fraction", mbs.padding_fraction, float(mbs.padded_tokens))
            if not actor_stopped:
                kl = {"sum": 0.0}

                def actor_micro_loss(mi: torch.Tensor) -> tuple[torch.Tensor, bool, Callable[[], None]]:
                    m = mask[mi]
                    logp, ent = policy_outputs(actor, rows.select(mi), with_entropy=True, temperature=temperature)
                    out = actor_loss(logp, ent, data.old_logprobs[mi], data.advantages[mi], m,
                                          policy_loss=spec.policy_loss, clip_low=cfg.clip_low,
                                          clip_high=cfg.clip_high, dual_clip=cfg.dual_clip, aggregation=aggregation,
                                          loss_normalizer=norm, token_count=n_tok, entropy_coef=cfg.entropy_coef,
                                          ref_logprobs=data.ref_logprobs[mi] if kl_loss_on else None,
                                          kl_coef=cfg.kl_coef, kl_kind=cfg.kl_kind)
                    w = float(m.sum())
                    if out.kl_ref_sum is not None:
                        add("actor/kl_ref", out.kl_ref_sum.item() / max(w, 1.0), w)

                    def record() -> None:
                        unit = float(m.any(-1).sum()) if seq_norm else w  # what the loss averages over
                        add("actor/pg_loss", out.pg_loss.item() * norm / max(unit, 1.0), unit)
                        add("actor/entropy", out.entropy_sum.item() / max(w, 1.0), w)
                        for key in ("clip_fraction", "approx_kl", "ratio_mean", "seq_ratio_mean"):
                            if key in out.stats:
                                add(f"actor/{key}", float(out.stats[key]), w)
                        kl["sum"] += float(out.stats.get("approx_kl", 0.0)) * w

                    return out.loss, bool(torch.isfinite(out.loss)), record

                if skipped.after_step(actor, "actor", optimizer_step(actor, mbs.batches, actor_micro_loss, pad_id)):
                    add("actor/grad_norm", _grad_norm(actor), 1.0)
                else:
                    skipped_here += 1
                if cfg.target_kl is not None and kl["sum"] / n_tok > cfg.target_kl:
                    actor_stopped = True
                    metrics.sums["actor/early_stopped"], metrics.weights["actor/early_stopped"] = 1.0, 1.0
            if critic is None:
                continue

            def critic_micro_loss(mi: torch.Tensor) -> tuple[torch.Tensor, bool, Callable[[], None]]:
                m = mask[mi]
                values = critic_outputs(critic, rows.select(mi))
                out = critic_loss(values, data.old_values[mi], data.returns[mi], m, value_clip=cfg.value_clip,
                                       token_count=n_tok, value_coef=cfg.value_coef)

                def record() -> None:
                    w = float(m.sum())
                    add("critic/value_loss", out.value_loss.item() * n_tok / max(w, 1.0), w)
                    add("critic/value_clip_fraction", float(out.stats["value_clip_fraction"]), w)

                return out.loss, bool(torch.isfinite(out.value_loss)), record

            if skipped.after_step(critic, "critic", optimizer_step(critic, mbs.batches, critic_micro_loss, pad_id)):
                add("critic/grad_norm", _grad_norm(critic), 1.0)
            else:
                skipped_here += 1
    actor.eval()
    if critic is not None:
        critic.eval()
    out = metrics.means()
    out.setdefault("actor/early_stopped", 0.0)
    out["update/skipped_steps"] = float(skipped_here)
    out["update/skipped_steps_total"] = float(skipped.counts["total"])
    out["update/skipped_steps_consecutive"] = float(skipped.consecutive())
    return out
