"""reasoning-gym's procedural datasets as text episodes: ``reasoning_gym/<dataset>``.

reasoning-gym (the ``reasoning-gym`` package, version 0.1.25; install extra ``reasoning_gym``) generates
questions with a checkable answer: ``create_dataset(name, seed=, size=)`` gives entries holding a
``question``, an ``answer`` and ``metadata``, and ``dataset.score_answer(answer, entry)`` scores a
reply's answer in [0, 1] (1: right; some datasets give partial credit). Every dataset of that version
but ``composite`` (a mix that needs a configuration naming others) is a task here,
``reasoning_gym/basic_arithmetic`` for instance; :data:`verlog.catalog.ENV_TASKS` lists them.

An episode is one question:

* **Observation**: the question, alone (the system prompt says how to answer). Characters outside the
  text space's charset are written as Python escapes (:func:`~verlog.envs.adapters.to_text_charset`).
* **Reply**: the answer is the text after the reply's last ``ACTION:`` marker (any marker that
  :mod:`verlog.envs.parsing` accepts) or ``ANSWER:`` marker, whichever comes last, to the end of the
  reply, with surrounding whitespace removed (answers may span lines: a grid, a list). A reply with no
  marker, or nothing after it, holds no answer: it scores 0, the next observation says so, and the
  format penalty applies. The answer is scored as written; no other cleaning is done.
* **Reward**: the dataset's own score. With ``attempts`` > 1 a wrong answer is followed by a feedback
  line (its score and the attempts left; never the right answer) and another try; a step's reward is
  what its answer adds to the best score so far, so an episode returns its best score.
* **End**: a right answer (score 1) ends the episode, and so does the last attempt. Both are
  ``terminated``: the number of attempts is a rule of the task, stated in the system prompt and counted
  in each feedback line, so after the last one nothing can follow. Only a cut from outside the task
  (``env.max_steps`` below ``attempts``) is ``truncated``, and the critic values what was left.

Seeds: the dataset is built once with ``dataset_seed`` and ``size`` questions; ``reset(seed=s)`` asks
question ``s % size`` (``reset()`` draws the index from the env's RNG). A question is generated from
global random states seeded with (``dataset_seed``, index), and the caller's global ``random`` and
numpy states are put back afterwards (some datasets draw from them), so a question is a function of the
seed alone and the rest of the process sees no draw. A question longer than the observation space
(8,192 characters after escaping) is passed over for the next index.

Actions are free text (``actions_are_closed = False``). ``valid_actions`` holds the answers of
``answer_pool`` other questions of the same dataset (fixed per dataset, computed once per process): the
random policy of ``verlog-eval random`` answers with a uniform draw from it, the answer of a random
other question; the format warm-up and the tiny tokenizer's corpus draw from it too. The same answer
may appear more than once, so a draw follows how often the dataset gives it. Datasets that score against
an entry's metadata and carry no answer (``boxnet``, ``graph_color``, ``propositional_logic``,
``rush_hour``) have an empty pool: ``valid_actions`` is ``[""]``, and random play gives no answer.

State keys (GiGPO) are the task, its dataset settings, the question index and the attempts used so far.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import math
import re
from collections import OrderedDict
from typing import Any, Mapping

from verlog.catalog import ENV_TASKS, OPTIONAL_FAMILIES
from verlog.envs.adapters import isolated_global_random, to_text_charset
from verlog.envs.base import OBS_MAX_CHARS, TextEnv, require_episode
from verlog.envs.options import instruction_builder
from verlog.envs.parsing import after_last_marker
from verlog.envs.registry import register

__all__ = ["INSTRUCTION_STYLES", "REASONING_GYM_TASKS", "ReasoningGymEnv", "build_brief_instruction",
           "build_instruction", "final_answer", "load_reasoning_gym"]

#: the dataset names of reasoning-gym 0.1.25 that are tasks here (``reasoning_gym/<name>``)
REASONING_GYM_TASKS: tuple[str, ...] = ENV_TASKS["reasoning_gym"]

#: the install line a missing package is answered with
INSTALL_HINT = OPTIONAL_FAMILIES["reasoning_gym"][1]

_ANSWER_MARKER = re.compile(r"(?<![^\W_])answer[*_`]*\s*:", re.IGNORECASE)
_END_TAG = "<|END|>"
_CACHED_QUESTIONS = 64  # entries kept per env (a retried question is not generated again)
_POOLS: dict[str, tuple[tuple[int, str], ...]] = {}  # answer pools, per dataset settings, for this process


def load_reasoning_gym() -> Any:
    """The ``reasoning_gym`` package, imported with the caller's global random states kept (importing it
    draws from Python's global ``random``).

    Raises:
        ImportError: it is not installed (the message gives the install line).
    """
    with isolated_global_random():
        try:
            return importlib.import_module("reasoning_gym")
        except ModuleNotFoundError as exc:
            if exc.name != "reasoning_gym":
                raise
            raise ImportError(f"reasoning_gym/* needs the reasoning-gym package: {INSTALL_HINT}") from None


def final_answer(reply: str) -> str | None:
    """The answer a reply gives: the text after its last ``ACTION:``-style marker (those of
    :func:`~verlog.envs.parsing.after_last_marker`) or ``ANSWER:`` marker, whichever comes last, up to a
    ``<|END|>`` tag, stripped of surrounding whitespace; ``None`` when there is no marker or nothing
    after it.

    Examples: ``"2 + 2 is 4.\\nACTION: 4"`` -> ``"4"``; ``"Answer: [1, 2]"`` -> ``"[1, 2]"``;
    ``"4"`` -> ``None``.
    """
    after_action = after_last_marker(reply)
    start = len(reply) - len(after_action) if after_action is not None else -1
    for match in _ANSWER_MARKER.finditer(reply):
        start = max(start, match.end())
    if start < 0:
        return None
    answer = reply[start:].split(_END_TAG, 1)[0].strip()
    return answer or None


def _attempts_line(attempts: int) -> str:
    if attempts == 1:
        return "You have one attempt."
    return f"You have {attempts} attempts: after a wrong answer you are told so and may answer again."


def build_instruction(attempts: int) -> str:
    """The system prompt (``instruction_style="full"``): how to give the answer, and the attempts."""
    return ("Answer the question you are given. Finish your reply with 'ACTION: <your answer>'; the text after "
            "the last 'ACTION:' (or 'ANSWER:') is taken as your answer, so write it exactly as the question asks. "
            + _attempts_line(attempts))


def build_brief_instruction(attempts: int) -> str:
    """The short system prompt (``instruction_style="brief"``, for tiny models): the reply format and the
    attempts."""
    return "Answer the question. Reply: ACTION: <your answer>. " + _attempts_line(attempts)


#: ``instruction_style`` -> the builder of the system prompt from the number of attempts
INSTRUCTION_STYLES = {"full": build_instruction, "brief": build_brief_instruction}


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def _item_seed(dataset_seed: int, index: int) -> int:
    """A 64-bit seed for generating question ``index`` of the dataset built with ``dataset_seed``."""
    digest = hashlib.blake2b(f"{dataset_seed}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class ReasoningGymEnv(TextEnv):
    """One reasoning-gym dataset as a :class:`~verlog.envs.base.TextEnv` (see the module docstring).

    Args:
        dataset: a reasoning-gym dataset name, e.g. ``"basic_arithmetic"``.
        attempts: answers allowed per question (1: a one-step episode).
        size: the questions of the dataset; ``reset(seed=s)`` asks question ``s % size``.
        dataset_seed: the dataset's seed (the questions it generates).
        config: the dataset's own settings (fields of its reasoning-gym config, e.g. ``{max_terms: 3}``).
        answer_pool: how many other questions' answers ``valid_actions`` holds.
        max_steps: a step limit from outside the task (``None``: ``attempts``); below ``attempts`` it
            truncates the episode.
        format_penalty: added to the reward of a reply that holds no answer (see
            :class:`~verlog.envs.base.TextEnv`).
        instruction_style: the system prompt, ``"full"`` or ``"brief"`` (:data:`INSTRUCTION_STYLES`).

    Raises:
        ImportError: reasoning-gym is not installed.
        TypeError / ValueError: a bad argument (the message names it), a dataset reasoning-gym does
            not know, or settings its config refuses.
    """

    actions_are_closed = False
    #: stands for a reply that holds no answer; it is scored as no answer at all (0)
    default_action = "(no answer)"

    def __init__(self, dataset: str, *, attempts: int = 1, size: int = 10_000, dataset_seed: int = 0,
                 config: Mapping[str, Any] | None = None, answer_pool: int = 8, max_steps: int | None = None,
                 format_penalty: float = 0.0, instruction_style: str = "full") -> None:
        attempts = _positive_int("attempts", attempts)
        build = instruction_builder(INSTRUCTION_STYLES, instruction_style)
        super().__init__(max_steps=attempts if max_steps is None else max_steps, format_penalty=format_penalty)
        self.size = _positive_int("size", size)
        self.answer_pool = _positive_int("answer_pool", answer_pool)
        if isinstance(dataset_seed, bool) or not isinstance(dataset_seed, int):
            raise TypeError(f"dataset_seed must be an int, got {type(dataset_seed).__name__}")
        if config is not None and not isinstance(config, Mapping):
            raise TypeError(f"config must be a mapping of the dataset's settings, got {type(config).__name__}")
        self.dataset_name, self.attempts, self.dataset_seed = dataset, attempts, dataset_seed
        self.config = dict(config or {})
        reserved = sorted({"seed", "size"} & set(self.config))
        if reserved:
            raise ValueError(f"config: {reserved} are set by the env's dataset_seed and size arguments")
        rg = load_reasoning_gym()
        with isolated_global_random(dataset_seed):
            try:
                self._dataset = rg.create_dataset(dataset, seed=dataset_seed, size=self.size, **self.config)
            except (TypeError, ValueError, AssertionError) as exc:
                raise ValueError(f"reasoning_gym dataset {dataset!r} with config {self.config}: "
                                 f"{' '.join(str(exc).split()) or type(exc).__name__}") from None
        self._settings = json.dumps([dataset, dataset_seed, self.size, self.config], sort_keys=True, default=str)
        self._entries: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._index: int | None = None
        self._question = ""
        self._used = 0
        self._best = 0.0
        self._score = 0.0
        self._answers: list[str] = []  # valid_actions: the pool's answers to other questions
        self._instruction = build(attempts)

    # -------------------------------------------------------------- the dataset
    def entry(self, index: int) -> dict[str, Any]:
        """Entry ``index`` of the dataset (``question``, ``answer``, ``metadata``), generated from global
        random states seeded with (``dataset_seed``, ``index``), the caller's states kept.

        Raises:
            IndexError: ``index`` outside 0..size-1.
        """
        if not 0 <= index < self.size:
            raise IndexError(f"question index {index} outside 0..{self.size - 1}")
        entry = self._entries.get(index)
        if entry is None:
            with isolated_global_random(_item_seed(self.dataset_seed, index)):
                entry = self._dataset[index]
            self._entries[index] = entry
            if len(self._entries) > _CACHED_QUESTIONS:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(index)
        return entry

    def score(self, answer: str | None, index: int | None = None) -> float:
        """The dataset's score of ``answer`` to question ``index`` (default: the current one), in [0, 1]:
        ``None`` or ``""`` is no answer; a scorer that raises, or returns a number outside [0, 1] or NaN,
        is read as 0 or clamped.

        Raises:
            RuntimeError: ``index`` omitted before the first reset.
        """
        entry = self.entry(require_episode(self._index) if index is None else index)
        with isolated_global_random(0):
            try:
                value = float(self._dataset.score_answer(answer or None, entry))
            except Exception:  # the dataset's scorer may trip over any text a model writes
                value = 0.0
        return min(1.0, max(0.0, value)) if math.isfinite(value) else 0.0

    def _pool(self) -> tuple[tuple[int, str], ...]:
        """(index, answer as text) of the last ``answer_pool`` questions of the index range (those
        without an answer left out), computed once per process for these dataset settings."""
        key = f"{self._settings}/{self.answer_pool}"
        pool = _POOLS.get(key)
        if pool is None:
            indices = range(self.size - 1, max(self.size - 1 - self.answer_pool, -1), -1)
            pool = tuple((i, str(a)) for i in indices if (a := self.entry(i)["answer"]) is not None)
            _POOLS[key] = pool
        return pool

    # -------------------------------------------------------------- TextEnv
    def _reset_game(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        start = seed % self.size if seed is not None else int(self.np_random.integers(self.size))
        for step in range(self.size):
            index = (start + step) % self.size
            question = to_text_charset(str(self.entry(index)["question"]))
            if len(question) <= OBS_MAX_CHARS:
                break
        else:
            raise RuntimeError(f"reasoning_gym/{self.dataset_name}: no question fits in {OBS_MAX_CHARS} characters")
        self._index, self._question = index, question
        self._used, self._best, self._score = 0, 0.0, 0.0
        self._answers = [a for i, a in self._pool() if i != index] or [""]
        return question, self._extra()

    def parse_action(self, reply: str) -> str | None:
        """The reply's answer (:func:`final_answer`), or ``None`` when it gives none."""
        return final_answer(reply)

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._score = self.score(None if action == self.default_action else action)
        self._used += 1
        reward = max(0.0, self._score - self._best)
        self._best = max(self._best, self._score)
        left = self.attempts - self._used
        solved = self._score >= 1.0
        if solved:
            obs = "Correct."
        else:
            obs = f"Not correct (score {self._score:.2f} of 1). " + (
                f"{left} attempt{'s' if left != 1 else ''} left: answer again." if left else "No attempts left.")
        return obs, reward, solved or left == 0, False, self._extra()

    def _extra(self) -> dict[str, Any]:
        return {"question_index": require_episode(self._index), "score": self._score,
                "attempts_left": self.attempts - self._used}

    @property
    def valid_actions(self) -> list[str]:
        """The answers of the pool's other questions (hints for random play; any answer is scored)."""
        return list(self._answers)

    @property
    def progression(self) -> float:
        """The best score of the episode so far, in [0, 1]."""
        return self._best

    @property
    def success(self) -> bool:
        """Whether a right answer (score 1) has been given."""
        return self._best >= 1.0

    @property
    def question_index(self) -> int:
        """The current question's index in the dataset. RuntimeError before the first reset."""
        return require_episode(self._index)

    @property
    def right_answer(self) -> str | None:
        """The dataset's answer to the current question (``None`` for datasets that score without one).
        RuntimeError before the first reset."""
        answer = self.entry(self.question_index)["answer"]
        return None if answer is None else str(answer)

    @property
    def state_key(self) -> bytes:
        """The dataset settings, the question index and the attempts used so far."""
        return json.dumps([self._settings, self.question_index, self._used]).encode()


def _register_all() -> None:
    for name in REASONING_GYM_TASKS:
        register(f"reasoning_gym/{name}", functools.partial(ReasoningGymEnv, name), replace=True)


_register_all()
