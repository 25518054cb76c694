"""TurnBatch: the per-turn tensor store of one PPO iteration.

Layout is time-major: index ``[t, n]`` is turn t of environment n (t = 0..T-1 consecutive in time
for that environment; an episode that ends after turn t continues with a new episode at t+1).
Every turn is one training sample: its own prompt (built by the memory) and its own response.

Shapes (T turns per env, N envs, P longest prompt, R ``rollout.max_response_tokens``):

====================  ===========  =====  ==========================================================
field                 shape        dtype  meaning
====================  ===========  =====  ==========================================================
prompt_ids            [T, N, P]    long   prompt token ids, RIGHT-padded with ``pad_id``
prompt_lengths        [T, N]       long   valid prompt tokens (>= 1)
response_ids          [T, N, R]    long   exact ids the engine returned, right-padded with ``pad_id``
response_mask         [T, N, R]    bool   True on the L response tokens (left-aligned, L >= 1)
behaviour_logprobs    [T, N, R]    float  engine's logprobs of the response tokens (raw distribution)
rewards               [T, N]       float  environment reward of the step (format penalty included)
terminated            [T, N]       bool   the episode really ended after this turn (no bootstrap)
truncated             [T, N]       bool   the episode was cut by a time limit after this turn
episode_ids           [T, N]       long   global id of the episode the turn belongs to
action_valid          [T, N]       bool   the reply parsed to a valid action
cut_at_max_tokens     [T, N]       bool   the reply hit ``max_response_tokens`` (finish reason "length")
====================  ===========  =====  ==========================================================

``bootstrap_prompts`` maps ``(t, n)`` to the prompt of the observation that followed turn t, for
every turn whose value chain cannot continue inside the batch: the last turn t = T-1 of each env
(unless it terminated; for a continuing episode this is the next batch's first prompt) and every
truncated turn (the final observation of the cut episode). Their critic values become
``bootstrap_values`` for :func:`verlog.algos.gae.dual_discount_gae`.

Fields filled by scoring (same shapes as above, ``None`` until then): ``old_logprobs``,
``ref_logprobs``, ``values`` (V_k at response token k: the critic's value of the state before
token k, so ``values[..., 0]`` is the turn value), ``bootstrap_values`` [T, N], ``token_rewards``,
``advantages``, ``returns``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Optional

import torch


@dataclass
class TurnBatch:
    """See the module docstring for every field's shape and meaning."""

    prompt_ids: torch.Tensor
    prompt_lengths: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    behaviour_logprobs: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    episode_ids: torch.Tensor
    action_valid: torch.Tensor
    cut_at_max_tokens: torch.Tensor
    pad_id: int
    bootstrap_prompts: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    old_logprobs: Optional[torch.Tensor] = None
    ref_logprobs: Optional[torch.Tensor] = None
    values: Optional[torch.Tensor] = None
    bootstrap_values: Optional[torch.Tensor] = None
    token_rewards: Optional[torch.Tensor] = None
    advantages: Optional[torch.Tensor] = None
    returns: Optional[torch.Tensor] = None

    @property
    def num_turns(self) -> int:
        """T: turns per environment."""
        return int(self.rewards.shape[0])

    @property
    def num_envs(self) -> int:
        """N: environments."""
        return int(self.rewards.shape[1])

    @property
    def response_lengths(self) -> torch.Tensor:
        """[T, N] long: L, the response tokens of each turn."""
        return self.response_mask.sum(-1)

    @staticmethod
    def from_turns(
        prompts: list[list[list[int]]],
        responses: list[list[list[int]]],
        logprobs: list[list[list[float]]],
        rewards: list[list[float]],
        terminated: list[list[bool]],
        truncated: list[list[bool]],
        episode_ids: list[list[int]],
        action_valid: list[list[bool]],
        cut_at_max_tokens: list[list[bool]],
        bootstrap_prompts: dict[tuple[int, int], list[int]],
        *,
        pad_id: int,
        max_response_tokens: int,
    ) -> "TurnBatch":
        """Pack nested ``[t][n]`` Python lists into padded tensors.

        Raises:
            ValueError: ragged outer dimensions, an empty prompt or response, or a response longer
                than ``max_response_tokens``.
        """
        T, N = len(prompts), len(prompts[0]) if prompts else 0
        if T == 0 or N == 0:
            raise ValueError("TurnBatch needs at least one turn and one environment")
        for name, seq in (("responses", responses), ("logprobs", logprobs), ("rewards", rewards)):
            if len(seq) != T or any(len(row) != N for row in seq):
                raise ValueError(f"TurnBatch: {name} is not [{T}][{N}]")
        P = max(len(p) for row in prompts for p in row)
        R = max_response_tokens
        prompt_ids = torch.full((T, N, P), pad_id, dtype=torch.long)
        response_ids = torch.full((T, N, R), pad_id, dtype=torch.long)
        response_mask = torch.zeros((T, N, R), dtype=torch.bool)
        behaviour = torch.zeros((T, N, R), dtype=torch.float32)
        prompt_lengths = torch.zeros((T, N), dtype=torch.long)
        for t in range(T):
            for n in range(N):
                p, r = prompts[t][n], responses[t][n]
                if not p or not r:
                    raise ValueError(f"TurnBatch: turn ({t}, {n}) has an empty prompt or response")
                if len(r) > R or len(logprobs[t][n]) != len(r):
                    raise ValueError(f"TurnBatch: turn ({t}, {n}) response of {len(r)} tokens (max {R}, "
                                     f"{len(logprobs[t][n])} logprobs)")
                prompt_ids[t, n, : len(p)] = torch.tensor(p)
                prompt_lengths[t, n] = len(p)
                response_ids[t, n, : len(r)] = torch.tensor(r)
                response_mask[t, n, : len(r)] = True
                behaviour[t, n, : len(r)] = torch.tensor(logprobs[t][n])
        return TurnBatch(
            prompt_ids=prompt_ids,
            prompt_lengths=prompt_lengths,
            response_ids=response_ids,
            response_mask=response_mask,
            behaviour_logprobs=behaviour,
            rewards=torch.tensor(rewards, dtype=torch.float32),
            terminated=torch.tensor(terminated, dtype=torch.bool),
            truncated=torch.tensor(truncated, dtype=torch.bool),
            episode_ids=torch.tensor(episode_ids, dtype=torch.long),
            action_valid=torch.tensor(action_valid, dtype=torch.bool),
            cut_at_max_tokens=torch.tensor(cut_at_max_tokens, dtype=torch.bool),
            pad_id=pad_id,
            bootstrap_prompts=dict(bootstrap_prompts),
        )

    def save(self, path: Path) -> None:
        """Write every tensor field (and the bootstrap prompts) with ``torch.save`` for analysis."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["bootstrap_prompts"] = {f"{t},{n}": ids for (t, n), ids in self.bootstrap_prompts.items()}
        torch.save(data, path)

    @staticmethod
    def load(path: Path) -> "TurnBatch":
        """Read a batch written by :meth:`save` (tensors only, ``weights_only=True``)."""
        data = torch.load(path, weights_only=True)
        data["bootstrap_prompts"] = {
            tuple(int(x) for x in key.split(",")): ids for key, ids in data["bootstrap_prompts"].items()
        }
        return TurnBatch(**data)
