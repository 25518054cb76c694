"""Shared test fixtures: a scripted counting game and a scripted rollout engine."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Sequence

from minigrid.core.constants import DIR_TO_VEC

from verlog.envs.base import TextEnv
from verlog.envs.registry import is_registered, register
from verlog.rollout.engine import Generation, SamplingParams

COUNT_TASK = "test/count"


class CountGame(TextEnv):
    """Each step says "wait" (count up, reward 0) or "end" (terminate with reward 1).

    Observation "count k" after k steps; the step limit truncates.
    """

    def __init__(self, *, max_steps: int | None = 4, format_penalty: float = 0.0) -> None:
        super().__init__(max_steps=max_steps, format_penalty=format_penalty)
        self._count = 0
        self._ended = False

    def _reset_game(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        self._count, self._ended = 0, False
        return "count 0", {}

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._count += 1
        if action == "end":
            self._ended = True
            return f"count {self._count}", 1.0, True, False, {}
        return f"count {self._count}", 0.0, False, False, {}

    @property
    def valid_actions(self) -> list[str]:
        return ["wait", "end"]

    @property
    def default_action(self) -> str:
        return "wait"

    @property
    def instruction(self) -> str:
        return "Say wait or end."

    @property
    def progression(self) -> float:
        return 1.0 if self._ended else 0.0


if not is_registered(COUNT_TASK):
    register(COUNT_TASK, CountGame)

COUNT_CORPUS = ["Say wait or end.", "Observation:\n", "Current observation:\n", "ACTION: wait", "ACTION: end",
                "Your previous reply did not contain a valid action"] + [f"count {k}" for k in range(20)]


class ScriptedEngine:
    """Replies from a script: ``script[call][n]`` is the text for prompt n of call number ``call``.

    Token ids are the tokenizer's encoding plus eos; logprobs are -0.5 per token.
    """

    def __init__(self, tokenizer: Any, script: list[list[str]]) -> None:
        self.tokenizer, self.script, self.calls = tokenizer, script, 0
        self.returned: list[list[list[int]]] = []
        self.prompts: list[list[list[int]]] = []

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        replies = self.script[self.calls]
        self.calls += 1
        self.prompts.append([list(p) for p in prompts])
        out = []
        for text in replies[: len(prompts)]:
            ids = self.tokenizer.encode(text, add_special_tokens=False)[: params.max_tokens - 1]
            ids = ids + [self.tokenizer.eos_token_id]
            out.append(Generation(ids, [-0.5] * len(ids), "stop"))
        self.returned.append([g.token_ids for g in out])
        return out

    def load_weights(self, named_tensors) -> None:  # pragma: no cover - not used by these tests
        raise NotImplementedError


COLORS = ["red", "green", "blue", "purple", "yellow", "grey"]
OBJECTS = ["ball", "box", "key", "door"]


def small_corpus() -> list[str]:
    """A few hundred short BabyAI-like strings, deterministic (a tokenizer corpus for tests)."""
    texts = [f"go to the {c} {o}" for c in COLORS for o in OBJECTS]
    texts += [f"You see a {c} {o} {n} steps {d}." for c in COLORS for o in OBJECTS
              for n in (1, 2, 3) for d in ("forward", "left", "right")]
    return texts + ["turn left", "turn right", "go forward", "pick up", "drop", "toggle"]


# ---------------------------------------------------------------- fault injection
FAULTY_TASK = "test/faulty_count"


class FaultPlan:
    """Which global env steps fault, and how; shared by forked async workers (multiprocessing Values).

    ``kinds[k]`` is the fault injected at global step number ``k`` (1-based, counted over every env's
    ``step`` calls while armed): ``"raise"`` (RuntimeError), ``"hang"`` (sleeps; interruptible by the
    in-process alarm), ``"hang_hard"`` (blocks SIGALRM then sleeps: only the supervisor can end it) or
    ``"kill"`` (``os._exit`` of the worker). ``injected`` counts the faults actually injected.
    """

    def __init__(self) -> None:
        import multiprocessing

        self.armed = multiprocessing.Value("b", 0)
        self.step = multiprocessing.Value("i", 0)
        self.injected = multiprocessing.Value("i", 0)
        self.kinds: dict[int, str] = {}

    def arm(self, kinds: dict[int, str], *, now: bool = True) -> None:
        """Set the schedule (before async workers fork: they copy it) and reset the counters."""
        self.kinds = dict(kinds)
        self.step.value, self.injected.value, self.armed.value = 0, 0, int(now)

    def next_fault(self) -> str | None:
        if not self.armed.value:
            return None
        with self.step.get_lock():
            self.step.value += 1
            kind = self.kinds.get(self.step.value)
            if kind is not None:
                self.injected.value += 1
        return kind


FAULT_PLAN = FaultPlan()


class FaultyCountGame(CountGame):
    """:class:`CountGame` that faults on :data:`FAULT_PLAN`'s schedule."""

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        import os
        import signal
        import time

        kind = FAULT_PLAN.next_fault()
        if kind == "raise":
            raise RuntimeError("injected fault")
        if kind == "hang":
            time.sleep(120)
        if kind == "hang_hard":
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
            time.sleep(120)
        if kind == "kill":
            os._exit(3)
        return super()._step_game(action)


if not is_registered(FAULTY_TASK):
    register(FAULTY_TASK, FaultyCountGame)


def trace_digest(env: TextEnv, seed: int, replies: Iterable[str]) -> str:
    """SHA-256 of everything a text env returns while playing ``replies`` from ``reset(seed=seed)``.

    Every observation, reward, termination flag and the whole info dict (sorted by key) go into the
    digest; when an episode ends the env is reset without a seed (continuing its own RNG), so one
    trace spans several episodes. Golden digests of such traces pin observations byte for byte
    across refactors and speed-ups of the text rendering.
    """
    digest = hashlib.sha256()

    def record(*parts: Any) -> None:
        digest.update(repr(parts).encode())

    obs, info = env.reset(seed=seed)
    record(obs, sorted(info.items()))
    for reply in replies:
        obs, reward, terminated, truncated, info = env.step(reply)
        record(obs, reward, terminated, truncated, sorted(info.items()))
        if terminated or truncated:
            obs, info = env.reset()
            record(obs, sorted(info.items()))
    return digest.hexdigest()


def model_weights(path: Path) -> dict[str, Any]:
    """The tensors of ``path/model.safetensors`` by name."""
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def face_from_distance(env: Any, target: tuple[int, int], distance: int) -> None:
    """BabyAI: put the agent `distance` cells from `target` in a straight line, facing it, path empty."""
    tx, ty = target
    for direction in range(4):
        dx, dy = DIR_TO_VEC[direction]
        cells = [(tx - dx * k, ty - dy * k) for k in range(1, distance + 1)]
        if all(1 <= x < env.minigrid.width - 1 and 1 <= y < env.minigrid.height - 1 for x, y in cells):
            if all(env.minigrid.grid.get(x, y) is None for x, y in cells):
                env.minigrid.agent_pos, env.minigrid.agent_dir = cells[-1], direction
                return
    raise AssertionError(f"no free straight approach of length {distance} to {target}")


def red_ball(env: Any) -> tuple[int, int]:
    """BabyAI: the position of the only red ball of the level."""
    grid = env.minigrid.grid
    hits = [
        (x, y)
        for x in range(grid.width)
        for y in range(grid.height)
        if (c := grid.get(x, y)) is not None and (c.type, c.color) == ("ball", "red")
    ]
    assert len(hits) == 1
    return hits[0]


#: ``verlog-train tiny`` shrunk to seconds a run (4 envs x 4 turns, one epoch of one minibatch, a 5-step
#: format warm-up, 2 evaluation episodes, no critic warm-up): the schedule tests add the iterations,
#: the vector mode and the keys they test.
SHRUNK_TINY_RUN = ("ppo.critic_warmup_iterations=0", "env.num_envs=4", "rollout.turns_per_env=4", "ppo.epochs=1",
                   "ppo.minibatches=1", "ppo.micro_batch_size=16", "format_warmup.steps=5", "format_warmup.episodes=2",
                   "model.tiny.corpus_episodes=10", "eval.episodes=2", "eval.num_envs=2", "eval.baseline=false",
                   "logging.progress=false")


def train_cli(recipe: str, *args: str, timeout: int = 600, check: bool = True,
              env: dict[str, str] | None = None) -> Any:
    """Run ``verlog-train <recipe> <args>`` in a subprocess (output captured as text) and return it.

    ``threads=1`` is added unless ``args`` name ``threads``: ``make test`` gives each worker one core,
    and a recipe's 2 intra-op threads on one shared core spin against the other worker (a 6-minute
    run took over 25). ``check`` asserts exit status 0 and shows the end of stderr otherwise.
    Returns the ``subprocess.CompletedProcess``; raises ``subprocess.TimeoutExpired`` after ``timeout``
    seconds."""
    import subprocess
    import sys

    threads = [] if any(a.startswith("threads=") for a in args) else ["threads=1"]
    proc = subprocess.run([sys.executable, "-c", "from verlog.cli import train_main; train_main()", recipe, *args,
                           *threads], capture_output=True, text=True, timeout=timeout, env=env)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def cli_error_line(main: Any, argv: list[str], capsys: Any) -> str:
    """Run a CLI entry point in-process; assert exit status 2 and exactly one non-blank stderr line,
    ``error: ...``, with no traceback; return that line."""
    import pytest

    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


#: TextWorld settings that keep the tests fast: treasure hunter at level 5 (1-2 s per game; its default
#: level 25 takes 5-12 s), the cooking and coin games at their defaults (BALROG's settings).
TEXTWORLD_FAST_SETTINGS: dict[str, Any] = {"treasure_hunter": {"level": 5}, "the_cooking_game": None,
                                           "coin_collector": None}
#: The games the session's TextWorld cache holds (``textworld_cache`` in conftest.py): (task, index).
TEXTWORLD_PREMADE = [("treasure_hunter", 0), ("treasure_hunter", 1), ("the_cooking_game", 0), ("coin_collector", 0)]


def load_golden_corpus(path: Path) -> tuple[dict, dict[str, list[dict]], dict[str, list[dict]], list[dict]]:
    """A golden corpus of JSON lines (gzipped when the name ends in ``.gz``), each with a ``record`` kind:
    one ``header``, ``level`` and ``episode`` records (grouped by their ``task``), and the rest (views or
    boards). Returns ``(header, levels by task, episodes by task, others)``, ``record`` removed."""
    header, levels, episodes, others = None, defaultdict(list), defaultdict(list), []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        for line in f:
            record = json.loads(line)
            kind = record.pop("record")
            if kind == "header":
                header = record
            elif kind in ("level", "episode"):
                (levels if kind == "level" else episodes)[record["task"]].append(record)
            else:
                others.append(record)
    return header, levels, episodes, others


def transcript_digest(name: str, *, seed: int = 3, steps: int = 400, **env_kwargs: Any) -> str:
    """SHA-256 of one seeded random-action transcript of text env ``name`` (``make_env(name,
    **env_kwargs)``): the reset's observation and info, then every step's 5-tuple, with a reset (and
    its observation and info) after each episode end. Pinned digests hold every byte of a text layer
    while its code is rewritten for speed."""
    import numpy as np

    from verlog.envs.registry import make_env

    env = make_env(name, **env_kwargs)
    rng = np.random.default_rng(seed)
    digest = hashlib.sha256()
    obs, info = env.reset(seed=seed)
    digest.update(repr((obs, sorted(info.items()))).encode())
    for i in rng.integers(0, len(env.valid_actions), steps):
        step = env.step(f"ACTION: {env.valid_actions[i]}")
        digest.update(repr(step[:4] + (sorted(step[4].items()),)).encode())
        if step[2] or step[3]:
            obs, info = env.reset()
            digest.update(repr((obs, sorted(info.items()))).encode())
    env.close()
    return digest.hexdigest()
