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
turn_mask             [T, N]       bool   the turn exists (``None``: all do; see whole-episode batches)
group_ids             [T, N]       long   episode group of the turn (``None`` outside group rollouts)
state_ids             [T, N]       long   id of the exact state the turn acted in (``None``: not recorded)
images                {(t, n): VisionInput}  the images of turn (t, n)'s prompt (vision memory only)
====================  ===========  =====  ==========================================================

``images`` extends the contract for vision-language models (``memory.type=vision``): the prompt of
turn (t, n) holds its images' placeholder tokens (``<|image_pad|>``, expanded to each image's token
count) and ``images[(t, n)]`` their pixel values ([P, D] float) and patch grids ([K, 3] long),
:class:`~verlog.vision.VisionInput`; a turn without images has no entry, and text runs have none at
all. ``bootstrap_images`` does the same for ``bootstrap_prompts``. The actor, critic and reference get
them with the turn's row wherever the row runs (:class:`~verlog.scoring.Rows`).

Whole-episode batches (:class:`~verlog.rollout.episodes.EpisodeCollector`) hold one complete
episode per env: T is the longest episode, turns past an episode's end are padding with
``turn_mask`` False (prompt of one ``pad_id``, empty response mask, zero reward), and no turn
needs a bootstrap value.

``bootstrap_prompts`` maps ``(t, n)`` to the prompt of the observation that followed turn t, for
every turn whose value chain cannot continue inside the batch: the last turn t = T-1 of each env
(unless it terminated; for a continuing episode this is the next batch's first prompt) and every
truncated turn (the final observation of the cut episode). Their critic values become
``bootstrap_values`` for :func:`verlog.algos.gae.dual_discount_gae`.

A TurnBatch holds what was collected and nothing else: scoring returns its outputs
(:class:`~verlog.scoring.Scores`) and the advantage step returns its own
(:class:`~verlog.advantages.Advantages`). :class:`ScoredBatch` bundles the three for dumps and
analysis, with these fields (same shapes as above; ``None`` when the run does not compute them):

====================  ===========  ==============================================================
field                 shape        meaning
====================  ===========  ==============================================================
old_logprobs          [T, N, R]    the actor's logprobs of the response tokens before the update
ref_logprobs          [T, N, R]    the reference policy's logprobs (only with a KL term)
values                [T, N, R]    V_k: the critic's value of the state before token k
                                   (``values[..., 0]`` is the turn value; PPO only)
bootstrap_values      [T, N]       critic value of each bootstrap prompt, 0 elsewhere (PPO only)
token_rewards         [T, N, R]    rewards placed on response tokens (PPO only)
advantages            [T, N, R]    the advantages the policy loss used (whitened when configured)
returns               [T, N, R]    the critic's targets (PPO only)
====================  ===========  ==============================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Optional

import torch

from verlog.vision import VisionInput


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
    turn_mask: Optional[torch.Tensor] = None
    group_ids: Optional[torch.Tensor] = None
    state_ids: Optional[torch.Tensor] = None
    images: dict[tuple[int, int], VisionInput] = field(default_factory=dict)
    bootstrap_images: dict[tuple[int, int], VisionInput] = field(default_factory=dict)

    @property
    def num_turns(self) -> int:
        """T: turns per environment."""
        return int(self.rewards.shape[0])

    @property
    def num_envs(self) -> int:
        """N: environments."""
        return int(self.rewards.shape[1])

    @property
    def turns(self) -> torch.Tensor:
        """[T, N] bool: the turns that exist (all of them unless ``turn_mask`` says otherwise)."""
        if self.turn_mask is None:
            return torch.ones_like(self.terminated)
        return self.turn_mask

    @property
    def num_real_turns(self) -> int:
        """How many turns exist (T x N unless some are padding)."""
        return int(self.turns.sum())

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
        turn_mask: list[list[bool]] | None = None,
        group_ids: list[list[int]] | None = None,
        state_ids: list[list[int]] | None = None,
        images: dict[tuple[int, int], VisionInput] | None = None,
        bootstrap_images: dict[tuple[int, int], VisionInput] | None = None,
    ) -> "TurnBatch":
        """Pack nested ``[t][n]`` Python lists into padded tensors (``images`` and ``bootstrap_images``,
        keyed ``(t, n)``, are kept as given).

        Where ``turn_mask[t][n]`` is False the turn is padding: its prompt and response lists must be
        empty, and it becomes a one-``pad_id`` prompt with an all-False response mask.

        Raises:
            ValueError: ragged outer dimensions, an empty prompt or response of a real turn, a
                non-empty one of a padding turn, or a response longer than ``max_response_tokens``.
        """
        T, N = len(prompts), len(prompts[0]) if prompts else 0
        if T == 0 or N == 0:
            raise ValueError("TurnBatch needs at least one turn and one environment")
        for name, seq in (("responses", responses), ("logprobs", logprobs), ("rewards", rewards)):
            if len(seq) != T or any(len(row) != N for row in seq):
                raise ValueError(f"TurnBatch: {name} is not [{T}][{N}]")
        real = turn_mask if turn_mask is not None else [[True] * N for _ in range(T)]
        P = max(1, max(len(p) for row in prompts for p in row))
        R = max_response_tokens
        prompt_ids = torch.full((T, N, P), pad_id, dtype=torch.long)
        response_ids = torch.full((T, N, R), pad_id, dtype=torch.long)
        response_mask = torch.zeros((T, N, R), dtype=torch.bool)
        behaviour = torch.zeros((T, N, R), dtype=torch.float32)
        prompt_lengths = torch.zeros((T, N), dtype=torch.long)
        for t in range(T):
            for n in range(N):
                p, r = prompts[t][n], responses[t][n]
                if not real[t][n]:
                    if p or r:
                        raise ValueError(f"TurnBatch: padding turn ({t}, {n}) has a prompt or response")
                    prompt_lengths[t, n] = 1
                    continue
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
            turn_mask=torch.tensor(turn_mask, dtype=torch.bool) if turn_mask is not None else None,
            group_ids=torch.tensor(group_ids, dtype=torch.long) if group_ids is not None else None,
            state_ids=torch.tensor(state_ids, dtype=torch.long) if state_ids is not None else None,
            images=dict(images or {}),
            bootstrap_images=dict(bootstrap_images or {}),
        )

    @staticmethod
    def concat_envs(batches: list["TurnBatch"]) -> "TurnBatch":
        """Join whole-episode batches side by side (env axis), padding turns and prompts.

        Only batches without bootstrap prompts (whole-episode batches) can be joined;
        ``group_ids`` and ``episode_ids`` must already be distinct between the batches. Their ``images``
        follow their envs.

        Raises:
            ValueError: no batch, bootstrap prompts, different pad ids or response
                widths, or ``group_ids``/``state_ids`` present in some batches only.
        """
        if not batches:
            raise ValueError("concat_envs: no batch")
        first = batches[0]
        for b in batches:
            if b.bootstrap_prompts:
                raise ValueError("concat_envs: only whole-episode batches (no bootstrap prompts) can be joined")
            if b.pad_id != first.pad_id or b.response_ids.shape[2] != first.response_ids.shape[2]:
                raise ValueError("concat_envs: batches differ in pad_id or response width")
            for name in ("group_ids", "state_ids"):
                if (getattr(b, name) is None) != (getattr(first, name) is None):
                    raise ValueError(f"concat_envs: {name} present in some batches only")
        T = max(b.num_turns for b in batches)
        P = max(b.prompt_ids.shape[2] for b in batches)

        def join(name: str, fill: float | bool | int) -> torch.Tensor | None:
            parts = [getattr(b, name) if name != "turn_mask" else b.turns for b in batches]
            if parts[0] is None:
                return None
            out = []
            for x in parts:
                pad = [0, 0] * (x.dim() - 1) + [0, T - x.shape[0]]
                if name == "prompt_ids":
                    pad[0:2] = [0, P - x.shape[2]]
                out.append(torch.nn.functional.pad(x, pad, value=fill))
            return torch.cat(out, dim=1)

        pad_id = first.pad_id
        prompt_lengths = join("prompt_lengths", 1)
        images, offset = {}, 0
        for b in batches:  # env n of the k-th batch is env offset + n of the joined one
            images.update({(t, offset + n): v for (t, n), v in b.images.items()})
            offset += b.num_envs
        return TurnBatch(
            prompt_ids=join("prompt_ids", pad_id), prompt_lengths=prompt_lengths,
            response_ids=join("response_ids", pad_id), response_mask=join("response_mask", False),
            behaviour_logprobs=join("behaviour_logprobs", 0.0), rewards=join("rewards", 0.0),
            terminated=join("terminated", False), truncated=join("truncated", False),
            episode_ids=join("episode_ids", -1), action_valid=join("action_valid", True),
            cut_at_max_tokens=join("cut_at_max_tokens", False), pad_id=pad_id,
            turn_mask=join("turn_mask", False), group_ids=join("group_ids", -1), state_ids=join("state_ids", 0),
            images=images,
        )

    def to_dict(self) -> dict:
        """Every field as tensors and plain types (bootstrap prompts keyed ``"t,n"``), for ``torch.save``."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["bootstrap_prompts"] = {f"{t},{n}": ids for (t, n), ids in self.bootstrap_prompts.items()}
        for name in ("images", "bootstrap_images"):
            data[name] = {f"{t},{n}": v.to_dict() for (t, n), v in getattr(self, name).items()}
        return data

    @staticmethod
    def from_dict(data: dict) -> "TurnBatch":
        """Inverse of :meth:`to_dict`; keys that are not fields are ignored."""
        names = {f.name for f in fields(TurnBatch)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["bootstrap_prompts"] = {
            tuple(int(x) for x in key.split(",")): ids for key, ids in data["bootstrap_prompts"].items()
        }
        for name in ("images", "bootstrap_images"):  # absent in files of earlier versions
            kwargs[name] = {tuple(int(x) for x in key.split(",")): VisionInput(v["pixel_values"], v["image_grid_thw"])
                            for key, v in data.get(name, {}).items()}
        return TurnBatch(**kwargs)


#: What scoring and the advantage step compute from a batch (see the module docstring's second table).
COMPUTED_FIELDS = ("old_logprobs", "ref_logprobs", "values", "bootstrap_values", "token_rewards", "advantages",
                   "returns")


@dataclass(frozen=True)
class ScoredBatch:
    """A collected :class:`TurnBatch` with what was computed from it, assembled once after the
    advantage step; the run's ``batches/iter_<k>.pt`` dumps and the GAE figures use it.

    The computed fields are described in the module docstring's second table.
    """

    batch: TurnBatch
    old_logprobs: Optional[torch.Tensor] = None
    ref_logprobs: Optional[torch.Tensor] = None
    values: Optional[torch.Tensor] = None
    bootstrap_values: Optional[torch.Tensor] = None
    token_rewards: Optional[torch.Tensor] = None
    advantages: Optional[torch.Tensor] = None
    returns: Optional[torch.Tensor] = None

    def save(self, path: Path) -> None:
        """Write the batch and the computed tensors with ``torch.save`` (tensors and plain types only)."""
        data = self.batch.to_dict()
        data["computed"] = {name: getattr(self, name) for name in COMPUTED_FIELDS if getattr(self, name) is not None}
        torch.save(data, path)

    @staticmethod
    def load(path: Path) -> "ScoredBatch":
        """Read a file written by :meth:`save` with ``weights_only=True`` (nothing is unpickled).

        Files of earlier versions, which kept the computed tensors beside the batch fields, load too.
        """
        data = torch.load(path, weights_only=True)
        computed = data.get("computed", {k: data.get(k) for k in COMPUTED_FIELDS})
        return ScoredBatch(TurnBatch.from_dict(data), **{k: computed.get(k) for k in COMPUTED_FIELDS})
