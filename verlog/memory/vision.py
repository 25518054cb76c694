"""``memory.type=vision``: the window memory of a vision-language model, whose prompts show images.

Observations of an env in an image mode (``env.observation_mode`` ``image`` or ``both``) are dicts
``{"text": str, "image": uint8 [H, W, 3]}`` (:meth:`~verlog.envs.base.TextEnv.enable_images`); a str
observation (text mode, or a fault's notice) is a turn without an image. The prompt is rendered by the
model's chat template with content parts (:data:`~verlog.vision.VL_CHAT_TEMPLATE` for the tiny model,
the family's own for a real one), each shown image's ``<|image_pad|>`` expanded to its token count, and
the images' pixel values come with it (:meth:`VisionMemory.prompt_images`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from verlog.memory.base import Memory, PromptStats, TurnOutcome
from verlog.memory.chat import check_int
from verlog.vision import VisionInput, cat_vision_inputs, expand_image_pads, image_input, load_image_processor

__all__ = ["VisionMemory"]

_STATE_VERSION = 1
_OBS_PREFIX = "Observation:\n"
_CURRENT_PREFIX = "Current observation:\n"


class _Seen:
    """One observation as the memory keeps it: its text, its image (or None) and the image's inputs."""

    __slots__ = ("text", "image", "inputs")

    def __init__(self, observation: Any, image_processor: Any) -> None:
        if isinstance(observation, dict):
            self.text = str(observation["text"])
            image = observation.get("image")
            self.image = None if image is None else np.asarray(image, dtype=np.uint8)
        elif isinstance(observation, str):
            self.text, self.image = observation, None
        else:
            raise TypeError("an observation must be a str or a dict with text and image, got "
                            f"{type(observation).__name__}")
        self.inputs = image_input(image_processor, self.image) if self.image is not None else None

    def state(self) -> dict[str, Any]:
        return {"text": self.text, "image": None if self.image is None else self.image.tolist()}

    @classmethod
    def from_state(cls, state: Mapping[str, Any], image_processor: Any) -> "_Seen":
        image = state["image"]
        obs = state["text"] if image is None else {"text": state["text"], "image": np.asarray(image, dtype=np.uint8)}
        return cls(obs, image_processor)


class VisionMemory(Memory):
    """Prompt = instruction + the last ``history_turns`` turns + the current observation, the last
    ``max_images`` images shown (``memory.type=vision``).

    Messages, in order: ``system`` = the instruction; for each kept past turn, ``user`` = [its image if
    shown] + ``"Observation:\\n"`` + its text, then ``assistant`` = the reply; ``user`` = [the current
    image if shown] + ``"Current observation:\\n"`` + the current text (+ ``"\\n\\n"`` + context)
    (+ ``"\\n\\n"`` + ``reply_hint``). The images shown are the newest ``max_images`` of the kept turns
    (the current one first); older turns keep their text only.

    Token budget (``max_prompt_tokens``, image tokens counted): the oldest past turns are dropped first
    (each counted in ``PromptStats.trimmed_turns``), then the current image, then the current text is
    cut (``trimmed_observation_tokens``, counted in characters' tokens). Every stored image left out of a
    prompt, by ``max_images`` or by the budget, is counted in ``PromptStats.dropped_images`` (the run's
    ``prompt/dropped_images``).

    Args:
        tokenizer: the model's tokenizer, whose chat template takes content parts (``{"type": "image"}``,
            ``{"type": "text", "text": ...}``) and writes an image as ``<|image_pad|>``.
        image_processor: the family's image processor (``AutoImageProcessor`` of the model directory).
        history_turns: k >= 0 past turns kept.
        max_prompt_tokens: the budget (> 0).
        max_images: most images shown in one prompt (>= 0; 0 shows none).
        reply_hint: text appended to the current observation.
        reply_prefix: text the reply starts with, pre-filled after the generation header.

    Raises:
        TypeError / ValueError: bad arguments; at :meth:`prompt_ids`, an instruction that does not fit
            the budget even alone.
    """

    def __init__(self, tokenizer: Any, image_processor: Any, *, history_turns: int = 1,
                 max_prompt_tokens: int = 1024, max_images: int = 1, reply_hint: str | None = None,
                 reply_prefix: str | None = None) -> None:
        check_int("history_turns", history_turns, minimum=0)
        check_int("max_prompt_tokens", max_prompt_tokens, minimum=1)
        check_int("max_images", max_images, minimum=0)
        if reply_prefix == "":
            raise ValueError("reply_prefix must not be empty (None: no prefix)")
        self.tokenizer, self.image_processor = tokenizer, image_processor
        self.history_turns, self.max_prompt_tokens, self.max_images = history_turns, max_prompt_tokens, max_images
        self.reply_hint, self.reply_prefix = reply_hint, reply_prefix
        self.merge_size = int(getattr(image_processor, "merge_size", 2))
        self._instruction: str | None = None
        self._current: _Seen | None = None
        self._context = ""
        self._history: deque[tuple[_Seen, str]] = deque(maxlen=history_turns)
        self._num_turns = 0
        self._cache: tuple[list[int], PromptStats, VisionInput | None] | None = None

    @classmethod
    def from_config(cls, tokenizer: Any, memory: Any) -> "VisionMemory":
        """A vision memory of ``memory`` (a :class:`~verlog.config.MemoryConfig`); the image processor is
        loaded from the tokenizer's directory (``tokenizer.name_or_path``)."""
        return cls(tokenizer, load_image_processor(tokenizer.name_or_path), history_turns=memory.history_turns,
                   max_prompt_tokens=memory.max_prompt_tokens, max_images=memory.max_images,
                   reply_hint=memory.reply_hint, reply_prefix=memory.reply_prefix)

    # ------------------------------------------------------------------ protocol
    def start_episode(self, instruction: str, observation: Any, context: str = "") -> None:
        """Forget the previous episode; ``observation`` (a str or an image-mode dict) becomes current."""
        self._instruction = str(instruction)
        self._current, self._context = _Seen(observation, self.image_processor), str(context)
        self._history.clear()
        self._num_turns = 0
        self._cache = None

    def add_turn(self, reply: str, next_observation: Any, context: str = "",
                 outcome: TurnOutcome | None = None) -> None:
        """Store (current observation, ``reply``); ``next_observation`` becomes current."""
        if self._current is None:
            raise RuntimeError("add_turn before start_episode")
        if self.history_turns:
            self._history.append((self._current, str(reply)))
        self._current, self._context = _Seen(next_observation, self.image_processor), str(context)
        self._num_turns += 1
        self._cache = None

    def prompt_ids(self) -> tuple[list[int], PromptStats]:
        """The prompt's ids (image placeholders expanded) and what the budget dropped."""
        ids, stats, _ = self._build()
        return list(ids), stats

    def prompt_images(self) -> VisionInput | None:
        """The images of :meth:`prompt_ids`' prompt, in prompt order (``None``: it shows none)."""
        return self._build()[2]

    # ------------------------------------------------------------------ rendering
    def _build(self) -> tuple[list[int], PromptStats, VisionInput | None]:
        if self._cache is None:
            self._cache = self._fit()
        return self._cache

    def _current_text(self, cut: int = 0) -> str:
        text = self._current.text if not cut else self._current.text[: max(0, len(self._current.text) - cut)]
        if self._context:
            text += "\n\n" + self._context
        if self.reply_hint:
            text += "\n\n" + self.reply_hint
        return _CURRENT_PREFIX + text

    def _render(self, kept: int, current_image: bool, cut: int = 0) -> tuple[list[int], list[_Seen], int]:
        """(ids, the observations whose image is shown in prompt order, stored images not shown) of
        the prompt keeping the last ``kept`` past turns."""
        turns = list(self._history)[len(self._history) - kept:] if kept else []
        seen = [obs for obs, _ in turns] + [self._current]
        with_image = [i for i, obs in enumerate(seen) if obs.image is not None]
        if not current_image:
            with_image = [i for i in with_image if i != len(seen) - 1]
        shown = set(with_image[len(with_image) - self.max_images:] if self.max_images else [])
        messages: list[dict[str, Any]] = [{"role": "system", "content": self._instruction}]
        for i, (obs, reply) in enumerate(turns):
            messages.append({"role": "user", "content": _parts(i in shown, _OBS_PREFIX + obs.text)})
            messages.append({"role": "assistant", "content": reply})
        messages.append({"role": "user", "content": _parts(len(seen) - 1 in shown, self._current_text(cut))})
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        images = [seen[i] for i in sorted(shown)]
        counts = [c for obs in images for c in obs.inputs.token_counts(self.merge_size)]
        text = expand_image_pads(text, counts)
        if self.reply_prefix is not None:
            text += self.reply_prefix
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        stored = sum(obs.image is not None for obs, _ in self._history) + (self._current.image is not None)
        return ids, images, stored - len(images)

    def _fit(self) -> tuple[list[int], PromptStats, VisionInput | None]:
        if self._current is None or self._instruction is None:
            raise RuntimeError("prompt_ids before start_episode")
        budget = self.max_prompt_tokens
        for kept in range(len(self._history), -1, -1):
            ids, images, dropped = self._render(kept, True)
            if len(ids) <= budget:
                return ids, PromptStats(len(ids), len(self._history) - kept, 0, dropped), self._vision(images)
        trimmed = len(self._history)
        ids, images, dropped = self._render(0, False)
        full = len(ids)
        cut, text_len = 0, len(self._current.text)
        while len(ids) > budget and cut < text_len:
            cut = min(text_len, max(cut * 2, 1))
            ids, images, dropped = self._render(0, False, cut)
        if len(ids) > budget:
            raise ValueError(f"the instruction alone does not fit max_prompt_tokens={budget}")
        return ids, PromptStats(len(ids), trimmed, full - len(ids), dropped), self._vision(images)

    @staticmethod
    def _vision(images: list[_Seen]) -> VisionInput | None:
        return cat_vision_inputs([obs.inputs for obs in images])

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        """Plain JSON state (images as nested lists of uint8): configuration, instruction, current
        observation and context, history (``[observation, reply]`` pairs, oldest first), ``num_turns``."""
        return {
            "version": _STATE_VERSION, "history_turns": self.history_turns, "max_prompt_tokens": self.max_prompt_tokens,
            "max_images": self.max_images, "reply_hint": self.reply_hint, "reply_prefix": self.reply_prefix,
            "instruction": self._instruction, "observation": None if self._current is None else self._current.state(),
            "context": self._context, "history": [[obs.state(), reply] for obs, reply in self._history],
            "num_turns": self._num_turns,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; afterwards the prompts are identical.

        Raises:
            ValueError: another version or configuration, or more history than ``history_turns``.
        """
        if not isinstance(state, Mapping) or state.get("version") != _STATE_VERSION:
            raise ValueError(f"vision memory state: expected version {_STATE_VERSION}")
        for key in ("history_turns", "max_prompt_tokens", "max_images", "reply_hint", "reply_prefix"):
            if state.get(key) != getattr(self, key):
                raise ValueError(f"vision memory state: {key}={state.get(key)!r} differs from this memory's "
                                 f"{getattr(self, key)!r}")
        if len(state["history"]) > self.history_turns:
            raise ValueError(f"vision memory state: {len(state['history'])} turns but "
                             f"history_turns={self.history_turns}")
        ip = self.image_processor
        self._instruction = state["instruction"]
        self._current = None if state["observation"] is None else _Seen.from_state(state["observation"], ip)
        self._context = str(state["context"])
        self._history = deque(((_Seen.from_state(obs, ip), str(reply)) for obs, reply in state["history"]),
                              maxlen=self.history_turns)
        self._num_turns = int(state["num_turns"])
        self._cache = None


def _parts(image: bool, text: str) -> list[dict[str, Any]]:
    """A user message's content parts: the image (when shown), then the text."""
    return ([{"type": "image"}] if image else []) + [{"type": "text", "text": text}]
