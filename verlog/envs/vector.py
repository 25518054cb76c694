"""Vectorised text envs on gymnasium's own ``SyncVectorEnv`` / ``AsyncVectorEnv``.

The vector env autoresets in gymnasium's ``SAME_STEP`` mode: when env ``i`` ends (terminated or
truncated), the observation returned for it is already the first one of its next episode, its top-level
info entries are the new episode's reset info, and the last observation/info of the finished episode
are kept in the infos. ``terminated``/``truncated``/``reward`` are those of the finishing step. Use
:func:`split_infos`, :func:`final_observations` and :func:`final_infos` instead of gymnasium's
internal key names (``final_obs``, ``final_info``, ``_<key>`` masks).

Seeding: ``reset(seed=s)`` seeds env ``i`` with ``s + i`` (gymnasium's rule); the vector env returned
by :func:`make_vector_env` uses its ``seed`` argument for the first reset if none is given, and each
later episode of env ``i`` is seeded with :func:`~verlog.envs.replay.episode_seed` of its first seed and
its episode count, so a run is reproducible from ``seed`` alone and any in-flight episode can be
re-created from its seed and replies (:func:`~verlog.envs.replay.restore_env_states`).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv, VectorWrapper

from verlog.envs.faults import SupervisedAsyncVectorEnv, make_guarded_env
from verlog.envs.groups import StateKeyInfo
from verlog.envs.registry import is_registered, make_env
from verlog.envs.replay import ReplayableEpisodes

__all__ = ["TextVectorEnv", "make_vector_env", "split_infos", "final_observations", "final_infos",
           "unbatch_observations"]

_FINAL_OBS = "final_obs"
_FINAL_INFO = "final_info"


class TextVectorEnv(VectorWrapper):
    """Thin wrapper of a gymnasium vector env of :class:`~verlog.envs.base.TextEnv` s.

    It (1) uses ``seed`` for the first ``reset`` when the caller gives none and (2) checks that
    ``step`` gets one reply ``str`` per env (a list, tuple or 1-D array of N strings).

    Args:
        env: a ``SyncVectorEnv``/``AsyncVectorEnv`` in ``SAME_STEP`` autoreset mode.
        seed: base seed of the first reset (env ``i`` gets ``seed + i``); kept as ``base_seed``.
    """

    def __init__(self, env: VectorEnv, seed: int) -> None:
        super().__init__(env)
        self.base_seed = seed
        self._has_reset = False

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        """Reset every env; ``seed=None`` on the first call means the constructor's ``seed``.

        Returns:
            ``(observations, infos)``: a tuple of N str and gymnasium's dict-of-arrays infos.
        """
        if seed is None and not self._has_reset:
            seed = self.base_seed
        self._has_reset = True
        return self.env.reset(seed=seed, options=options)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call the method ``name`` of every sub-env (found through its wrappers, in its worker process when
        async) with ``args`` and ``kwargs``; one result per env. gymnasium's ``VectorWrapper`` does not
        forward ``call``."""
        return self.env.call(name, *args, **kwargs)

    def step(self, actions: Sequence[str]):
        """Step every env with one reply string each.

        Args:
            actions: N reply strings (list, tuple or 1-D numpy array).

        Returns:
            ``(observations, rewards, terminations, truncations, infos)``: tuple of N str, float array
            ``(N,)``, bool arrays ``(N,)``, dict-of-arrays infos (see :func:`split_infos`).

        Raises:
            TypeError: not a sequence of str. ValueError: wrong number of replies.
            RuntimeError: ``step`` before ``reset``.
        """
        if not self._has_reset:
            raise RuntimeError("step() called before reset()")
        if isinstance(actions, str) or not isinstance(actions, (list, tuple, np.ndarray)):
            raise TypeError(f"actions must be a list/tuple of {self.num_envs} str, got {type(actions).__name__}")
        actions = tuple(actions)
        if len(actions) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} replies (one per env), got {len(actions)}")
        for i, reply in enumerate(actions):
            if not isinstance(reply, str):
                raise TypeError(f"reply {i} must be a str, got {type(reply).__name__}")
        return self.env.step(actions)


def make_vector_env(
    name: str,
    num_envs: int,
    *,
    seed: int,
    mode: str = "async",
    env_kwargs: dict[str, Any] | None = None,
    context: str | None = None,
    step_timeout_s: float | None = None,
    restart_attempts: int = 3,
    state_keys: bool = False,
) -> TextVectorEnv:
    """Build ``num_envs`` copies of the registered text env ``name`` as one gymnasium vector env.

    Args:
        name: a registered env name, e.g. ``"babyai/goto"``.
        num_envs: number of envs N (>= 1).
        seed: non-negative base seed; the first reset seeds env ``i`` with ``seed + i``.
        mode: ``"async"`` (one subprocess per env, ``shared_memory=False`` because observations are
            variable-length strings) or ``"sync"`` (all in this process).
        env_kwargs: keyword arguments of :func:`~verlog.envs.registry.make_env`.
        context: multiprocessing start method for ``"async"`` (``None``: gymnasium's default, i.e. fork
            on Linux; ``"spawn"``/``"forkserver"`` need picklable ``env_kwargs`` and an env registered
            on import of its module).
        step_timeout_s: seconds one env step/reset may take before the env counts as hung and is
            restarted (``None``: no limit); see :mod:`verlog.envs.faults`.
        restart_attempts: rebuild tries in a row before a fault becomes fatal (>= 1).
        state_keys: add ``info["state_key"]`` (:class:`~verlog.envs.groups.StateKeyInfo`, for GiGPO).

    Every sub-env is wrapped in :class:`~verlog.envs.faults.FaultCatchingEnv` and ``async`` runs under
    :class:`~verlog.envs.faults.SupervisedAsyncVectorEnv`: an env that raises, hangs or whose worker
    dies is restarted and its episode ends truncated (counted in the infos, see
    :func:`~verlog.envs.faults.count_faults`).

    Returns:
        A :class:`TextVectorEnv` (a gymnasium ``VectorEnv``) in ``SAME_STEP`` autoreset mode.

    Raises:
        ValueError: unknown name, bad ``num_envs``/``seed``/``mode``. TypeError: bad argument types or
            ``env_kwargs`` the env does not accept (raised while building the first env).
    """
    if not is_registered(name):
        make_env(name)  # raises the registry's ValueError naming the known families
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        raise TypeError(f"env_kwargs must be a dict or None, got {type(env_kwargs).__name__}")
    if step_timeout_s is not None and (isinstance(step_timeout_s, bool) or not step_timeout_s > 0):
        raise ValueError(f"step_timeout_s must be a positive number or None, got {step_timeout_s!r}")
    if isinstance(restart_attempts, bool) or not isinstance(restart_attempts, int) or restart_attempts < 1:
        raise ValueError(f"restart_attempts must be an int >= 1, got {restart_attempts!r}")
    if mode not in ("sync", "async"):
        raise ValueError(f"mode must be 'async' or 'sync', got {mode!r}")
    env_fns = [functools.partial(_replayable, name, dict(env_kwargs or {}), step_timeout_s, restart_attempts,
                                 bool(state_keys)) for _ in range(num_envs)]
    if mode == "sync":
        vec: VectorEnv = SyncVectorEnv(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
    elif mode == "async":
        # AsyncVectorEnv builds env_fns[0]() in this process first, so bad env_kwargs fail here.
        vec = SupervisedAsyncVectorEnv(env_fns, step_timeout_s=step_timeout_s, restart_attempts=restart_attempts,
                                       context=context)
    else:
        raise ValueError(f"mode must be 'async' or 'sync', got {mode!r}")
    return TextVectorEnv(vec, int(seed))


def _replayable(name: str, env_kwargs: dict[str, Any], step_timeout_s: float | None,
                restart_attempts: int, state_keys: bool = False) -> ReplayableEpisodes:
    """One sub-env: fault-guarded (:mod:`verlog.envs.faults`) inside known episode seeds and a reply
    log (:mod:`verlog.envs.replay`), so a restarted env still resets with its episode's seed; with
    ``state_keys``, its infos carry the state id (:class:`~verlog.envs.groups.StateKeyInfo`)."""
    env = make_guarded_env(name, env_kwargs, step_timeout_s, restart_attempts)
    return ReplayableEpisodes(StateKeyInfo(env) if state_keys else env)


def unbatch_observations(observations: Any, num_envs: int) -> list[Any]:
    """The N observations of a vector env's ``reset``/``step``, one per env: the str observations as
    they are, image-mode observations (gymnasium batches a ``Dict`` space into a dict of batched
    values: a tuple of N texts, an [N, H, W, 3] image array) split back into one dict per env."""
    if isinstance(observations, dict):
        return [{key: value[i] for key, value in observations.items()} for i in range(num_envs)]
    return list(observations)


def _num_envs(infos: dict[str, Any], num_envs: int | None) -> int:
    if num_envs is not None:
        return num_envs
    for key, value in infos.items():
        if key.startswith("_") and isinstance(value, np.ndarray):
            return len(value)
    raise ValueError("cannot infer num_envs from empty infos; pass num_envs")


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _split(infos: dict[str, Any], num_envs: int, skip: tuple[str, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{} for _ in range(num_envs)]
    for key, value in infos.items():
        if key.startswith("_") or key in skip:
            continue
        mask = infos.get(f"_{key}")
        if mask is None or len(mask) != num_envs:
            raise ValueError(f"infos key {key!r} has no mask of length {num_envs}: not gymnasium vector infos?")
        nested = _split(value, num_envs, ()) if isinstance(value, dict) else None
        for i in np.flatnonzero(mask):
            out[i][key] = nested[i] if nested is not None else _plain(value[i])
    return out


def split_infos(infos: dict[str, Any], num_envs: int) -> list[dict[str, Any]]:
    """Turn gymnasium's dict-of-arrays vector infos into one plain dict per env.

    Entries an env did not report are absent from its dict; numpy scalars become Python scalars. The
    final observation/info of episodes that just ended are NOT included: use :func:`final_observations`
    and :func:`final_infos`. For an env that just autoreset, the dict is its new episode's reset info.

    Args:
        infos: the ``infos`` returned by the vector env's ``reset``/``step``.
        num_envs: N.

    Returns:
        A list of N dicts.

    Raises:
        ValueError: a key without a matching ``_key`` mask of length N.
    """
    return _split(infos, num_envs, skip=(_FINAL_OBS, _FINAL_INFO))


def final_observations(infos: dict[str, Any], num_envs: int | None = None) -> list[str | None]:
    """Last observation of each env whose episode ended on this step, else ``None``.

    Args:
        infos: the ``infos`` of a vector ``step``.
        num_envs: N; inferred from the infos' masks when ``None``.

    Returns:
        A list of N entries.
    """
    return _final_entries(infos, _FINAL_OBS, num_envs, lambda observations, n: observations)


def final_infos(infos: dict[str, Any], num_envs: int | None = None) -> list[dict[str, Any] | None]:
    """Last info (plain dict) of each env whose episode ended on this step, else ``None``.

    Args:
        infos: the ``infos`` of a vector ``step``.
        num_envs: N; inferred from the infos' masks when ``None``.

    Returns:
        A list of N entries.
    """
    return _final_entries(infos, _FINAL_INFO, num_envs, lambda final, n: _split(final, n, skip=()))


def _final_entries(
    infos: dict[str, Any], key: str, num_envs: int | None, per_env: Callable[[Any, int], Sequence[Any]]
) -> list[Any]:
    """Entry ``i`` of ``per_env(infos[key], N)`` for each env ``i`` whose episode ended on this step
    (``infos["_" + key]`` is set), else ``None``; all ``None`` when ``key`` is absent."""
    n = _num_envs(infos, num_envs)
    if key not in infos:
        return [None] * n
    mask = infos[f"_{key}"]
    values = per_env(infos[key], n)
    return [values[i] if mask[i] else None for i in range(n)]
