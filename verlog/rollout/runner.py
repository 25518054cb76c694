"""The episode runner: env <-> memory <-> policy, one turn at a time, closing finished episodes into
:class:`~verlog.rollout.records.EpisodeRecord` s.

Every text-env loop is built from the same pieces:

* :class:`Slot`: one env slot's running episode: its memory, current observation and info, and the
  accumulators of its record (return, length, invalid replies, optional turn log).
* :func:`generate_turn`: the model's replies for a turn: each memory's prompt, ONE batched
  ``engine.generate``, the decoded texts (each after its memory's reply prefix, if any).
* :class:`Step`: what one env step returned for one slot, from a gymnasium vector env
  (:func:`vector_step`, same-step autoreset: a finished episode's final observation/info and the next
  episode's first ones) or from a single env (:func:`env_step`).
* :func:`play_turn`: one turn of the running slots: feed each slot its step, account return/length/
  invalid replies, update its memory, close a finished episode into its record.

Users and what they do when an episode ends:

* :class:`~verlog.rollout.collector.FixedTurnCollector`: T turns of every slot of a vector env per
  batch; a finished slot starts the autoreset episode at once (a truncated one first renders its
  bootstrap prompt).
* :class:`~verlog.rollout.episodes.EpisodeCollector`: one episode per slot of a vector env per call;
  a finished slot is left out of later turns (``max_turns`` cuts an endless one).
* :func:`run_episodes`: a list of :class:`EpisodeSpec` s over per-slot envs with a :class:`Policy`; a
  finished slot takes the next spec (fixed-seed evaluation, the BALROG suite, the warm-up's random
  play in :func:`verlog.warmup.collect_prompts`).

The tool conversations (:mod:`verlog.rollout.conversations`) do not fit: a conversation is run as a
whole by the tool loop or by an outside agent through the proxy, with no env step or memory to drive
turn by turn; they produce the same :class:`~verlog.rollout.records.EpisodeRecord` s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Protocol, Sequence

from verlog.envs import make_env
from verlog.envs.base import observation_text
from verlog.envs.faults import count_faults
from verlog.envs.mixture import TASK_INFO_KEY
from verlog.envs.vector import final_infos, final_observations, split_infos, unbatch_observations
from verlog.memory import Memory, TurnOutcome, join_reply
from verlog.rollout.engine import Generation, RolloutEngine, SamplingParams
from verlog.rollout.records import CollectStats, EpisodeRecord

__all__ = [
    "EpisodeSpec", "Memory", "Outcome", "Policy", "Slot", "Step", "env_step", "generate_turn", "play_turn",
    "prompt_images", "run_episodes", "vector_reset", "vector_step",
]


@dataclass(frozen=True)
class Step:
    """One env step of one slot.

    Attributes:
        observation: the observation after the step; for an episode that ended, its final one (a str,
            or an image-mode dict, :meth:`~verlog.envs.base.TextEnv.enable_images`).
        reward: the step's reward.
        terminated: the episode ended for good.
        truncated: the episode was cut without terminating.
        info: the step's own info (for an episode that ended, its final info).
        next_episode: ``(first observation, reset info)`` of the episode a vector env started in this
            slot when this one ended (same-step autoreset); ``None`` otherwise.
    """

    observation: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    next_episode: tuple[Any, dict[str, Any]] | None = None

    @property
    def done(self) -> bool:
        """The episode ended at this step."""
        return self.terminated or self.truncated

    @property
    def valid(self) -> bool:
        """The env accepted the reply as an action."""
        return bool(self.info["action_valid"])

    @property
    def outcome(self) -> TurnOutcome:
        """What the step made of the reply, for the memory (:meth:`~verlog.memory.Memory.add_turn`)."""
        return TurnOutcome.from_step(self.reward, self.info)


@dataclass
class Slot:
    """One env slot and the episode running in it.

    Args:
        index: the slot's number (the env's index in a vector env).
        memory: the slot's memory, or ``None`` for a policy that needs none.
        record_turns: keep a turn log for the record.
    """

    index: int
    memory: Memory | None = None
    record_turns: bool = False
    episode_id: int = 0
    task: str = ""
    seed: int | None = None
    observation: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    episode_return: float = 0.0
    length: int = 0
    invalid_actions: int = 0
    turns: list[dict[str, Any]] | None = None

    def begin(self, episode_id: int, observation: Any, info: dict[str, Any], *, task: str = "",
              seed: int | None = None) -> None:
        """Start episode ``episode_id`` from its first observation and reset info (memory included).

        The memory gets the observation as the env returned it (an image-mode dict included); the slot
        keeps its text (:attr:`observation`, for turn logs and checkpoints). The episode's task is
        ``info["task"]`` when the env reports one (a task mixture's drawn task,
        :class:`~verlog.envs.mixture.TaskMixture`), else ``task``."""
        if self.memory is not None:
            self.memory.start_episode(info["instruction"], observation, info["context"])
        self.episode_id, self.task, self.seed = episode_id, info.get(TASK_INFO_KEY, task), seed
        self.observation, self.info = observation_text(observation), info
        self.episode_return, self.length, self.invalid_actions = 0.0, 0, 0
        self.turns = [] if self.record_turns else None

    def advance(self, reply: str, step: Step) -> EpisodeRecord | None:
        """Account one step answered with ``reply``; a continuing episode's memory gets the turn.

        Returns:
            The episode's record when the step ended it, else ``None``.
        """
        self.episode_return += step.reward
        self.length += 1
        self.invalid_actions += int(not step.valid)
        if self.turns is not None:
            self.turns.append({"observation": self.observation, "context": self.info["context"], "reply": reply,
                               "action": step.info["action"], "action_valid": step.valid, "reward": step.reward})
        self.observation, self.info = observation_text(step.observation), step.info
        if not step.done:
            if self.memory is not None:
                self.memory.add_turn(reply, step.observation, step.info["context"], step.outcome)
            return None
        return EpisodeRecord(
            episode_id=self.episode_id, env_index=self.index, episode_return=self.episode_return, length=self.length,
            success=bool(step.info["success"]), progression=float(step.info["progression"]),
            invalid_actions=self.invalid_actions, truncated=step.truncated, task=self.task, seed=self.seed,
            turns=self.turns)


class Outcome(NamedTuple):
    """One slot's turn: the slot, its reply, its step and its record (``None``: the episode goes on)."""

    slot: Slot
    reply: str
    step: Step
    record: EpisodeRecord | None


def generate_turn(memories: Sequence[Memory], engine: RolloutEngine, decode: Callable[[list[list[int]]], list[str]],
                  sampling: SamplingParams, stats: CollectStats | None = None,
                  ) -> tuple[list[list[int]], list[Generation], list[str]]:
    """Build each memory's prompt and generate one reply each in one batched call.

    A memory's prompt may end with its reply prefix's ids (:mod:`verlog.memory`); the engine then
    generates only the completion. The generations' ``token_ids`` are the completion's ids, the ones
    to train; the reply text is the whole reply, :func:`~verlog.memory.join_reply` of the memory's
    ``reply_prefix`` and the decoded completion, as the env parses it and the memory stores it.

    Prompt sizes and timings go to ``stats`` when given.

    Returns:
        (prompt token ids per memory, the engine's generations, the whole reply texts).
    """
    tic = time.perf_counter()
    prompts = []
    for memory in memories:
        ids, pstats = memory.prompt_ids()
        prompts.append(ids)
        if stats is not None:
            stats.prompt_tokens.append(pstats.num_tokens)
            stats.trimmed_turns += pstats.trimmed_turns
            stats.trimmed_observation_tokens += pstats.trimmed_observation_tokens
            stats.dropped_images += getattr(pstats, "dropped_images", 0)  # a user memory's stats may lack it
    if stats is not None:
        stats.prompt_seconds += time.perf_counter() - tic
    tic = time.perf_counter()
    images = prompt_images(memories)
    if any(v is not None for v in images):
        gens = engine.generate(prompts, sampling, images=images)  # type: ignore[call-arg]
    else:
        gens = engine.generate(prompts, sampling) if prompts else []
    completions = decode([g.token_ids for g in gens]) if gens else []
    replies = [join_reply(m.reply_prefix, text) for m, text in zip(memories, completions)]
    if stats is not None:
        stats.generate_seconds += time.perf_counter() - tic
    return prompts, gens, replies


def prompt_images(memories: Sequence[Memory]) -> list[Any]:
    """Each memory's current prompt's images (:meth:`~verlog.memory.VisionMemory.prompt_images`), or
    ``None`` for a memory that shows none (every text memory)."""
    return [m.prompt_images() if hasattr(m, "prompt_images") else None for m in memories]


def play_turn(slots: Sequence[Slot], replies: Sequence[str], steps: Iterable[Step], *,
              stats: CollectStats | None = None, max_turns: int | None = None) -> Iterator[Outcome]:
    """Advance each slot by its reply's step (:meth:`Slot.advance`), in order.

    Lazy: the k-th step is drawn from ``steps`` only after the caller has handled outcome k-1, so
    per-slot envs (:func:`env_step` in a generator) step one by one between the caller's reactions
    (a finished slot starting its next episode).

    Args:
        slots, replies: the running slots and their replies (same length).
        steps: one :class:`Step` per slot.
        stats: counts the turns and invalid replies, when given.
        max_turns: an episode reaching this many steps without ending is cut (recorded as truncated).
    """
    for slot, reply, step in zip(slots, replies, steps):
        if max_turns is not None and not step.done and slot.length + 1 >= max_turns:
            step = replace(step, truncated=True)
        record = slot.advance(reply, step)
        if stats is not None:
            stats.turns += 1
            stats.invalid_actions += int(not step.valid)
        yield Outcome(slot, reply, step, record)


# ---------------------------------------------------------------------- env stepping
def env_step(env: Any, reply: str) -> Step:
    """Step one text env (:class:`~verlog.envs.base.TextEnv`) with ``reply``."""
    obs, reward, terminated, truncated, info = env.step(reply)
    return Step(obs, float(reward), bool(terminated), bool(truncated) and not bool(terminated), info)


def _add_faults(stats: CollectStats, infos: dict[str, Any]) -> None:
    counts = count_faults(infos)
    stats.env_faults += counts.faults
    stats.env_restarts += counts.restarts
    stats.env_fault_messages.extend(counts.messages)


def vector_reset(venv: Any, seed: int | list[int], stats: CollectStats) -> list[tuple[str, dict[str, Any]]]:
    """Reset every env of a vector env (:func:`~verlog.envs.vector.make_vector_env`); faults go to ``stats``.

    Returns:
        ``(first observation, reset info)`` per env.
    """
    obs, infos = venv.reset(seed=seed)
    _add_faults(stats, infos)
    return list(zip(unbatch_observations(obs, venv.num_envs), split_infos(infos, venv.num_envs)))


def vector_step(venv: Any, indices: Sequence[int], replies: Sequence[str], stats: CollectStats) -> list[Step]:
    """Step a vector env: env ``indices[j]`` gets ``replies[j]``, every other env an empty reply
    (gymnasium steps all envs together; their outcome is dropped). Env time and faults go to ``stats``.

    Returns:
        One :class:`Step` per index, in order.
    """
    N = venv.num_envs
    actions = [""] * N
    for n, reply in zip(indices, replies):
        actions[n] = reply
    tic = time.perf_counter()
    obs, rewards, terminated, truncated, infos = venv.step(actions)
    obs = unbatch_observations(obs, N)
    stats.env_seconds += time.perf_counter() - tic
    _add_faults(stats, infos)
    step_infos, finals_obs, finals_info = split_infos(infos, N), final_observations(infos, N), final_infos(infos, N)
    out = []
    for n in indices:
        term, trunc = bool(terminated[n]), bool(truncated[n])
        done = term or trunc
        out.append(Step(finals_obs[n] if done else obs[n], float(rewards[n]), term, trunc and not term,
                        finals_info[n] if done else step_infos[n], (obs[n], step_infos[n]) if done else None))
    return out


# ---------------------------------------------------------------------- a list of episodes, each once
@dataclass(frozen=True)
class EpisodeSpec:
    """One episode: ``task`` reset with ``seed``; ``index`` is its number within the task."""

    task: str
    seed: int
    index: int


class Policy(Protocol):
    """Chooses the replies of one turn for the running episodes.

    ``act(memories, infos, specs, turn)`` gets, for each running episode, its memory (``None`` when
    the policy needs none), the latest ``info`` of its env and its :class:`EpisodeSpec`; ``turn``
    counts the policy calls of this run. It returns one reply string per episode. A policy with a
    ``forget(spec)`` method is told when an episode has ended.
    """

    needs_memory: bool

    def act(self, memories: Sequence[Any], infos: Sequence[dict[str, Any]], specs: Sequence[EpisodeSpec],
            turn: int) -> list[str]: ...


def run_episodes(
    specs: Sequence[EpisodeSpec],
    policy: Policy,
    *,
    num_envs: int,
    make_memory: Callable[[], Any] | None = None,
    env_kwargs: Callable[[str], dict[str, Any]] | dict[str, Any] | None = None,
    record_turns: bool = False,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
) -> list[EpisodeRecord]:
    """Run every episode of ``specs`` once to its end with ``policy``; return their records.

    Up to ``num_envs`` episodes run side by side, one batched policy call per turn; a slot whose
    episode ends takes the next spec at once. Envs are built once per (slot, task) and reused.

    Args:
        specs: the episodes, in the order they are started.
        policy: see :class:`Policy`.
        num_envs: parallel slots (>= 1).
        make_memory: a fresh per-episode memory (required when ``policy.needs_memory``).
        env_kwargs: keyword arguments of :func:`~verlog.envs.make_env`, or a function task -> kwargs.
        record_turns: also keep each episode's turn log (``EpisodeRecord.turns``).
        on_episode: called with each record as soon as its episode ends (e.g. to append it to a file).

    Returns:
        One record per spec, in the order of ``specs``: ``episode_id`` is the spec's index,
        ``env_index`` the slot that ran it.

    Raises:
        ValueError: ``num_envs`` < 1, or a policy that needs memory without ``make_memory``.
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    if policy.needs_memory and make_memory is None:
        raise ValueError("this policy needs make_memory")
    kwargs_of = env_kwargs if callable(env_kwargs) else (lambda task, _kw=dict(env_kwargs or {}): _kw)
    pending = list(enumerate(specs))[::-1]  # pop() from the end = start in order
    envs: dict[tuple[int, str], Any] = {}
    active: dict[int, tuple[int, EpisodeSpec, Slot]] = {}  # slot index -> (order, spec, slot)
    records: dict[int, EpisodeRecord] = {}

    def start(index: int) -> None:
        order, spec = pending.pop()
        key = (index, spec.task)
        if key not in envs:
            envs[key] = make_env(spec.task, **kwargs_of(spec.task))
        obs, info = envs[key].reset(seed=spec.seed)
        slot = Slot(index, make_memory() if policy.needs_memory else None, record_turns)  # type: ignore[misc]
        slot.begin(spec.index, obs, info, task=spec.task, seed=spec.seed)
        active[index] = (order, spec, slot)

    for index in range(min(num_envs, len(pending))):
        start(index)
    turn = 0
    try:
        while active:
            running = [active[i] for i in sorted(active)]
            slots = [slot for _, _, slot in running]
            replies = policy.act([s.memory for s in slots], [s.info for s in slots], [spec for _, spec, _ in running],
                                 turn)
            turn += 1
            steps = (env_step(envs[(s.index, spec.task)], reply) for (_, spec, s), reply in zip(running, replies))
            for (order, spec, _), outcome in zip(running, play_turn(slots, replies, steps)):
                if outcome.record is None:
                    continue
                records[order] = outcome.record
                if hasattr(policy, "forget"):
                    policy.forget(spec)
                if on_episode is not None:
                    on_episode(outcome.record)
                del active[outcome.slot.index]
                if pending:
                    start(outcome.slot.index)
    finally:
        for env in envs.values():
            env.close()
    return [records[i] for i in range(len(specs))]
