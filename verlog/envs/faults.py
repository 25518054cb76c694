"""Environment faults: an env that raises, hangs or whose worker dies is restarted, never fatal.

Two layers, both reporting through the ``info`` dicts so the collector counts every event:

* :class:`FaultCatchingEnv` wraps each sub-env (in this process for ``sync``, inside the worker for
  ``async``). An exception in ``step``/``reset``, or a step/reset running past ``step_timeout_s``
  (interrupted with ``SIGALRM``; works for hangs that return to the Python interpreter, in the main
  thread of a process), ends the episode as **truncated**: the step returns the last good
  observation (so the collector can bootstrap from it), reward ``0.0``, ``truncated=True``. The next
  ``reset`` (gymnasium's same-step autoreset) rebuilds the env via the registry with the same kwargs
  and resets it with a fresh deterministic seed.
* :class:`SupervisedAsyncVectorEnv` (``async`` mode) handles what cannot be caught in-process: a
  worker that died (``os._exit``, segfault, SIGKILL from outside, during a call or between calls) or a
  step stuck past :func:`backstop_seconds` (e.g. in C code). It kills that worker, starts a new one and
  reports the same truncated step for it only.

Info keys, present only on infos of calls that had an event: :data:`FAULTS_KEY` (int, faults in this
call), :data:`RESTARTS_KEY` (int, env rebuilds in this call), :data:`FAULT_KEY` (str, what happened).
:func:`count_faults` sums them over a vector step's infos (top level and final infos).
A ``sync`` env cannot survive ``os._exit`` (it is this process); use ``async`` for that.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
import time
from contextlib import contextmanager
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import gymnasium
from gymnasium.vector import AsyncVectorEnv, AutoresetMode
from gymnasium.error import AlreadyPendingCallError
from gymnasium.vector.async_vector_env import AsyncState, _async_worker
from gymnasium.vector.utils import CloudpickleWrapper, clear_mpi_env_vars, concatenate, iterate

from verlog.envs.registry import make_env

__all__ = ["EnvFaultError", "StepTimeout", "FaultCatchingEnv", "SupervisedAsyncVectorEnv", "FaultCounts",
           "count_faults", "make_guarded_env", "restart_seed", "backstop_seconds",
           "FAULTS_KEY", "RESTARTS_KEY", "FAULT_KEY"]

log = logging.getLogger("verlog.envs.faults")

FAULTS_KEY = "env_faults"
RESTARTS_KEY = "env_restarts"
FAULT_KEY = "env_fault"


class EnvFaultError(RuntimeError):
    """An env could not be brought back: ``restart_attempts`` rebuild+reset tries all failed."""


class StepTimeout(Exception):
    """A step/reset ran past ``step_timeout_s`` (raised inside it by the alarm handler)."""


def restart_seed(first_seed: int, restart: int, salt: int = 0) -> int:
    """Deterministic fresh seed for restart number ``restart`` (>= 1) of an env first seeded ``first_seed``.

    Returns:
        An int in [0, 2**31).
    """
    return int(np.random.SeedSequence([int(first_seed), int(salt), int(restart)]).generate_state(1)[0] % 2**31)


def backstop_seconds(step_timeout_s: float | None) -> float | None:
    """How long the async supervisor waits for a worker (s): ``3 * step_timeout_s + 5`` (a step may
    include a step, an autoreset and a rebuild, each with its own in-process alarm), or ``None``."""
    return None if step_timeout_s is None else 3.0 * step_timeout_s + 5.0


@contextmanager
def _time_limit(seconds: float | None, what: str) -> Iterator[None]:
    """Raise :class:`StepTimeout` inside the block after ``seconds`` (main thread only; else no limit)."""
    if seconds is None or threading.current_thread() is not threading.main_thread() \
            or not hasattr(signal, "setitimer"):
        yield
        return

    def _raise(signum: int, frame: Any) -> None:
        raise StepTimeout(f"{what} took longer than {seconds:g} s (env.step_timeout_s)")

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def fault_final_info(last_info: dict[str, Any], reason: str) -> dict[str, Any]:
    """The info of a step ended by a fault: the last good info, one more step, the fault fields.

    ``action_valid`` is ``True`` (the reply was never judged: no format penalty, not counted invalid).
    """
    info = dict(last_info)
    for key in (FAULTS_KEY, RESTARTS_KEY, FAULT_KEY):
        info.pop(key, None)
    info["episode_step"] = int(info.get("episode_step", 0)) + 1
    info.update(action="", action_valid=True, game_reward=0.0)
    info[FAULTS_KEY], info[FAULT_KEY] = 1, reason
    return info


class FaultCatchingEnv(gymnasium.Wrapper):
    """Catch exceptions and (Python-level) hangs of one text env; rebuild it on the next reset.

    Args:
        name: registered env name; ``kwargs``: its :func:`~verlog.envs.registry.make_env` kwargs.
        step_timeout_s: seconds one step or reset may take (``None``: no limit).
        restart_attempts: rebuild+reset tries in a row before :class:`EnvFaultError` (>= 1).

    Raises:
        whatever ``make_env`` raises for the first build (a bad name or kwargs is a config error).
    """

    def __init__(self, name: str, kwargs: dict[str, Any], *, step_timeout_s: float | None = None,
                 restart_attempts: int = 3) -> None:
        super().__init__(make_env(name, **kwargs))
        self._name, self._kwargs = name, dict(kwargs)
        self.step_timeout_s, self.restart_attempts = step_timeout_s, restart_attempts
        self._broken = False
        self._first_seed: int | None = None
        self._restarts = 0
        self._last_obs: str = ""
        self._last_info: dict[str, Any] = {}

    def _fault(self, what: str, err: BaseException) -> str:
        reason = f"{self._name} {what}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        log.warning("environment fault (restarting it): %s", reason)
        return reason

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Step; on an exception or timeout return ``(last good obs, 0.0, False, True, fault info)``."""
        try:
            with _time_limit(self.step_timeout_s, "step"):
                obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as err:  # noqa: BLE001 - any env failure becomes a counted restart
            self._broken = True
            return self._last_obs, 0.0, False, True, fault_final_info(self._last_info, self._fault("step", err))
        self._last_obs, self._last_info = obs, info
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """Reset; after a fault (or when reset itself fails) rebuild and reset with a fresh seed.

        Raises:
            EnvFaultError: ``restart_attempts`` rebuilds in a row failed.
        """
        if self._first_seed is None:
            self._first_seed = 0 if seed is None else int(seed)
        faults, restarts, reason = 0, 0, ""
        while True:
            if self._broken:
                if restarts >= self.restart_attempts:
                    raise EnvFaultError(f"{self._name}: {restarts} restarts failed in a row; last: {reason}")
                self._restarts += 1
                restarts += 1
                seed = restart_seed(self._first_seed, self._restarts) if seed is None or restarts > 1 else seed
                try:
                    self.env.close()
                except Exception:  # noqa: BLE001 - a broken env may fail to close too
                    pass
            try:
                with _time_limit(self.step_timeout_s, "reset"):
                    if self._broken:
                        self.env = make_env(self._name, **self._kwargs)
                    obs, info = self.env.reset(seed=seed, options=options)
            except Exception as err:  # noqa: BLE001
                faults += 1
                reason = self._fault("reset", err)
                self._broken = True
                continue
            break
        self._broken = False
        info = dict(info)
        if faults:
            info[FAULTS_KEY], info[FAULT_KEY] = faults, reason
        if restarts:
            info[RESTARTS_KEY] = restarts
        self._last_obs, self._last_info = obs, info
        return obs, info


def make_guarded_env(name: str, kwargs: dict[str, Any], step_timeout_s: float | None,
                     restart_attempts: int) -> FaultCatchingEnv:
    """Picklable factory of :class:`FaultCatchingEnv` (for ``functools.partial`` env fns)."""
    return FaultCatchingEnv(name, kwargs, step_timeout_s=step_timeout_s, restart_attempts=restart_attempts)


class SupervisedAsyncVectorEnv(AsyncVectorEnv):
    """gymnasium's ``AsyncVectorEnv`` (SAME_STEP autoreset, no shared memory) that survives a dead or
    stuck worker: that worker is killed and replaced, its env restarted with a fresh deterministic
    seed, and its step reported as truncated with the last good observation (other envs unaffected).

    Args:
        env_fns: one factory per env (normally :func:`make_guarded_env` partials).
        step_timeout_s: see :func:`backstop_seconds`; ``None`` waits forever (a dead worker is still
            detected at once).
        restart_attempts: worker restarts in a row before :class:`EnvFaultError`.
        context: multiprocessing start method (``None``: gymnasium's default).
    """

    def __init__(self, env_fns: list[Callable[[], Any]], *, step_timeout_s: float | None,
                 restart_attempts: int = 3, context: str | None = None) -> None:
        super().__init__(env_fns, shared_memory=False, autoreset_mode=AutoresetMode.SAME_STEP, context=context)
        self.backstop_s = backstop_seconds(step_timeout_s)
        self.restart_attempts = restart_attempts
        self._first_seeds: list[int] = [i for i in range(self.num_envs)]
        self._worker_restarts = [0] * self.num_envs
        self._last: list[tuple[str, dict[str, Any]]] = [("", {})] * self.num_envs
        self._unsent: dict[int, str] = {}  # worker -> why its last command could not be sent

    # -------------------------------------------------------------- worker management
    def _start_worker(self, i: int) -> None:
        ctx = multiprocessing.get_context(self.context)
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_async_worker, name=f"Worker<{type(self).__name__}>-{i}",
                              args=(i, CloudpickleWrapper(self.env_fns[i]), child, parent, None,
                                    self.error_queue, self.autoreset_mode))
        process.daemon = self.daemon
        with clear_mpi_env_vars():
            process.start()
        child.close()
        self.parent_pipes[i], self.processes[i] = parent, process

    def _kill_worker(self, i: int) -> None:
        process, pipe = self.processes[i], self.parent_pipes[i]
        if process.is_alive():
            process.kill()
        process.join(timeout=10)
        if pipe is not None:
            pipe.close()

    def _receive(self, i: int, deadline: float | None) -> tuple[Any, str]:
        """One worker's reply, or ``(None, reason)`` when it died, failed or ran past the deadline."""
        pipe = self.parent_pipes[i]
        wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            if wait is not None and not pipe.poll(wait):
                return None, f"worker {i} did not answer within {self.backstop_s:g} s (hung)"
            result, success = pipe.recv()
        except (EOFError, OSError) as err:
            code = self.processes[i].exitcode
            return None, f"worker {i} died (exit code {code}, {type(err).__name__})"
        if not success:
            return None, f"worker {i} raised: {self._drain_error(i)}"
        return result, ""

    def _drain_error(self, i: int) -> str:
        try:
            _, exctype, value, _ = self.error_queue.get(timeout=5)
            return f"{getattr(exctype, '__name__', exctype)}: {value}"
        except Exception:  # noqa: BLE001 - queue empty or broken
            return "unknown error"

    def _restart(self, i: int, reason: str) -> tuple[str, dict[str, Any]]:
        """Replace worker ``i`` and reset its env with fresh seeds; returns ``(obs, reset info)``."""
        log.warning("environment fault (restarting worker): %s", reason)
        for attempt in range(1, self.restart_attempts + 1):
            self._kill_worker(i)
            self._start_worker(i)
            self._worker_restarts[i] += 1
            seed = restart_seed(self._first_seeds[i], self._worker_restarts[i], salt=1)
            self._send(i, ("reset", {"seed": seed, "options": None}))
            deadline = None if self.backstop_s is None else time.monotonic() + self.backstop_s
            result, why = self._gather(i, deadline)
            if result is not None:
                obs, info = result
                info = dict(info)
                info[RESTARTS_KEY] = info.get(RESTARTS_KEY, 0) + attempt
                info[FAULTS_KEY] = info.get(FAULTS_KEY, 0) + attempt - 1
                return obs, info
            reason = why
        raise EnvFaultError(f"worker {i}: {self.restart_attempts} restarts failed in a row; last: {reason}")

    def _send(self, i: int, message: tuple[str, Any]) -> None:
        """Send a command to worker ``i``; a worker that is already gone (killed between calls: the pipe is
        broken) is remembered and replaced by the next ``*_wait`` instead of failing the whole vector env.
        A worker already known to be gone is not sent to (the first reason is kept)."""
        if i in self._unsent:
            return
        try:
            self.parent_pipes[i].send(message)
        except (BrokenPipeError, ConnectionError, EOFError, OSError) as err:
            self.processes[i].join(timeout=1.0)  # its end of the pipe is closed: it is dead or dying
            code = self.processes[i].exitcode
            self._unsent[i] = f"worker {i} died (exit code {code}, {type(err).__name__} on {message[0]})"

    def _gather(self, i: int, deadline: float | None) -> tuple[Any, str]:
        """Worker ``i``'s reply to the last command, or ``(None, reason)`` (see :meth:`_receive`)."""
        if i in self._unsent:
            return None, self._unsent.pop(i)
        return self._receive(i, deadline)

    # -------------------------------------------------------------- reset / step
    def reset_async(self, seed: int | list[int | None] | None = None, options: dict | None = None) -> None:
        """As gymnasium's; remembers each env's seed to derive restart seeds from, and a worker found dead
        when its reset is sent is replaced in :meth:`reset_wait` (a partial reset, ``options["reset_mask"]``,
        goes to gymnasium's own ``reset_async`` unchanged)."""
        if isinstance(seed, (int, np.integer)):
            self._first_seeds = [int(seed) + i for i in range(self.num_envs)]
        if options is not None and "reset_mask" in options:
            super().reset_async(seed=seed, options=options)
            return
        self._assert_is_running()
        if self._state != AsyncState.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `reset_async` while waiting for a pending call to `{self._state.value}` to complete",
                str(self._state.value))
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"reset got {len(seeds)} seeds for {self.num_envs} envs")
        for i, env_seed in enumerate(seeds):
            self._send(i, ("reset", {"seed": env_seed, "options": options}))
        self._state = AsyncState.WAITING_RESET

    def step_async(self, actions: Any) -> None:
        """As gymnasium's, but a worker found dead when its action is sent is replaced in :meth:`step_wait`
        (its step becomes a truncated fault step) instead of raising ``BrokenPipeError``."""
        self._assert_is_running()
        if self._state != AsyncState.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `step_async` while waiting for a pending call to `{self._state.value}` to complete.",
                str(self._state.value))
        for i, action in enumerate(iterate(self.action_space, actions)):
            self._send(i, ("step", action))
        self._state = AsyncState.WAITING_STEP

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """As gymnasium's, but a worker found dead when the call is sent is left for :meth:`call_wait`
        instead of raising ``BrokenPipeError``."""
        self._assert_is_running()
        if self._state != AsyncState.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `call_async` while waiting for a pending call to `{self._state.value}` to complete.",
                str(self._state.value))
        for i in range(self.num_envs):
            self._send(i, ("_call", (name, args, kwargs)))
        self._state = AsyncState.WAITING_CALL

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """Gather every worker's result of the call; ``None`` for a worker that died, hung past the
        backstop or raised. That worker is killed (a hung one could answer later, out of turn) and
        replaced by the next step, whose result for it is a truncated fault step (logged and counted
        like any fault there)."""
        self._assert_is_running()
        deadline = None if self.backstop_s is None else time.monotonic() + self.backstop_s
        results = []
        for i in range(self.num_envs):
            result, reason = self._gather(i, deadline)
            if reason:
                log.warning("environment fault during a call: %s", reason)
                self._kill_worker(i)
                self._unsent[i] = reason  # the next step_wait restarts it
            results.append(result)
        self._state = AsyncState.DEFAULT
        return tuple(results)

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """Gather every worker's reset; a dead/stuck worker is replaced (counted in its info)."""
        self._assert_is_running()
        deadline = None if self.backstop_s is None else time.monotonic() + self.backstop_s
        infos: dict[str, Any] = {}
        observations = []
        for i in range(self.num_envs):
            result, reason = self._gather(i, deadline)
            if result is None:
                obs, info = self._restart(i, reason)
                info[FAULTS_KEY] = info.get(FAULTS_KEY, 0) + 1
                info[FAULT_KEY] = reason
            else:
                obs, info = result
            self._last[i] = (obs, info)
            observations.append(obs)
            infos = self._add_info(infos, info, i)
        self.observations = concatenate(self.single_observation_space, observations, self.observations)
        self._state = AsyncState.DEFAULT
        return deepcopy(self.observations), infos

    def step_wait(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Gather every worker's step; a dead/stuck worker's step becomes a truncated fault step."""
        self._assert_is_running()
        deadline = None if self.backstop_s is None else time.monotonic() + self.backstop_s
        observations, rewards, terms, truncs, infos = [], [], [], [], {}
        for i in range(self.num_envs):
            result, reason = self._gather(i, deadline)
            if result is None:
                last_obs, last_info = self._last[i]
                obs, reset_info = self._restart(i, reason)
                result = (obs, 0.0, False, True,
                          {**reset_info, "final_obs": last_obs, "final_info": fault_final_info(last_info, reason)})
            obs, reward, terminated, truncated, info = result
            self._last[i] = (obs, {k: v for k, v in info.items() if k not in ("final_obs", "final_info")})
            observations.append(obs)
            rewards.append(reward)
            terms.append(terminated)
            truncs.append(truncated)
            infos = self._add_info(infos, info, i)
        self.observations = concatenate(self.single_observation_space, observations, self.observations)
        self._state = AsyncState.DEFAULT
        return (deepcopy(self.observations), np.array(rewards, dtype=np.float64), np.array(terms, dtype=np.bool_),
                np.array(truncs, dtype=np.bool_), infos)

    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """As gymnasium's, but terminates the workers when one is dead (a clean close would block)."""
        if any(not p.is_alive() for p in self.processes):
            terminate = True
        super().close_extras(timeout=timeout, terminate=terminate)


@dataclass
class FaultCounts:
    """Fault events of one vector ``reset``/``step`` (summed over envs, final infos included)."""

    faults: int = 0
    restarts: int = 0
    messages: list[str] = field(default_factory=list)


def count_faults(infos: dict[str, Any]) -> FaultCounts:
    """Sum :data:`FAULTS_KEY`/:data:`RESTARTS_KEY` over a vector step's infos and its final infos.

    Args:
        infos: gymnasium vector infos (dict of arrays with ``_key`` masks).
    """
    out = FaultCounts()
    for level in (infos, infos.get("final_info") or {}):
        for key, attr in ((FAULTS_KEY, "faults"), (RESTARTS_KEY, "restarts")):
            if key in level:
                mask = level[f"_{key}"]
                setattr(out, attr, getattr(out, attr) + int(np.asarray(level[key])[mask].sum()))
        if FAULT_KEY in level:
            out.messages.extend(str(m) for m, ok in zip(level[FAULT_KEY], level[f"_{FAULT_KEY}"]) if ok)
    return out
