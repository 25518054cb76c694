"""The rollout-engine protocol shared by every backend (transformers, vLLM).

An engine turns prompt token ids into response token ids. The ids it returns are
the exact ids that get trained: nothing downstream decodes and re-encodes them.

:class:`Collector` is the protocol of what turns engine generations into training batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ContextManager, Iterable, Protocol, Sequence, runtime_checkable

import torch

if TYPE_CHECKING:
    from verlog.batch import TurnBatch
    from verlog.rollout.records import CollectStats


class EngineConfigError(ValueError):
    """An engine was asked for an option it cannot provide here (e.g. vLLM's sleep mode on a
    platform without one). The message is one line naming the option."""


@dataclass(frozen=True)
class SamplingParams:
    """How to decode one batch of prompts.

    Attributes:
        max_tokens: most response tokens to generate per prompt (the end-of-sequence
            token counts and is included in the response when generated).
        temperature: softmax temperature; ``0`` or ``greedy=True`` means argmax decoding.
        top_p: nucleus-sampling mass in (0, 1]; 1 disables it.
        top_k: keep the k most likely tokens; ``-1`` (or 0) disables it.
        greedy: decode by argmax, ignoring temperature/top_p/top_k.
        seed: optional seed for this call's sampling (``None``: the engine's own stream).
    """

    max_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    greedy: bool = False
    seed: int | None = None

    @property
    def is_greedy(self) -> bool:
        return self.greedy or self.temperature == 0.0


@dataclass
class Generation:
    """One prompt's response.

    Attributes:
        token_ids: response token ids, length L (1 <= L <= max_tokens); includes the
            end-of-sequence token when the model produced it.
        logprobs: length-L list of log pi(token_k | prompt, tokens_<k) in nats, under
            the distribution sampled from before truncation: softmax(logits / temperature),
            no top-p/top-k (temperature 1 when greedy), which is the distribution PPO's ratio
            refers to. The vLLM engine returns the raw distribution's (temperature 1) whatever
            the temperature.
        finish_reason: ``"stop"`` (end-of-sequence token produced) or ``"length"``
            (cut at ``max_tokens``).
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str


@runtime_checkable
class RolloutEngine(Protocol):
    """What the collector and the evaluator need from a generation backend."""

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """Generate one response for each prompt (a list of token ids), in order."""
        ...

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Replace the engine's weights with the trainer's (HF parameter names)."""
        ...


@runtime_checkable
class Collector(Protocol):
    """What the trainer needs from any collector of training turns.

    Implemented by :class:`~verlog.rollout.collector.FixedTurnCollector` (T turns of N text envs),
    :class:`~verlog.rollout.episodes.EpisodeCollector` (grouped whole episodes) and the tool
    conversations' :class:`~verlog.rollout.conversations.ToolLoopCollector` and
    :class:`~verlog.rollout.conversations.ProxyCollector`.

    Attributes:
        sampling: the decoding parameters of the next :meth:`collect`; the trainer replaces its
            temperature between batches (``rollout.temperature_schedule``).
    """

    sampling: SamplingParams

    def collect(self) -> tuple[TurnBatch, CollectStats]:
        """One batch of turns and what happened while collecting it."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Plain-JSON state from which :meth:`load_state_dict` continues the collection exactly."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict`."""
        ...

    def weights_changing(self) -> ContextManager[None]:
        """Context manager around the trainer's loading of new weights into the engine: a collector
        whose generations run in other threads (the proxy's) holds new requests and drains those in
        flight; the others do nothing."""
        ...

    def close(self) -> None:
        """Release what the collector holds (envs, servers)."""
        ...
