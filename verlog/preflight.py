"""Checks that a valid config can be built: every name it gives exists where it is looked up.

:func:`verlog.config.validate` checks values alone (types, ranges, choices); the names below need
the registries of the layers above the config, so they are checked here, once the config is loaded
and before anything is built: the environment task, the tool task, the proxy's credit mode and the
proxy's agent function.
"""

from __future__ import annotations

from verlog.agent.loading import load_agent_fn
from verlog.agent.tasks import AGENT_TASKS
from verlog.config import ConfigError, TrainConfig
from verlog.envs.registry import is_registered
from verlog.proxy.adapter import CREDIT_MODES

__all__ = ["check_buildable"]


def check_buildable(cfg: TrainConfig) -> None:
    """Check that the environment, tool task, credit mode and agent function of ``cfg`` exist.

    Imports the environment family of ``env.task`` (agent loop ``env``) and the module of
    ``agent.agent`` (agent loop ``proxy``).

    Raises:
        ConfigError: one line naming the first offending key: ``agent.credit`` not a credit mode of
            :mod:`verlog.proxy.adapter`, ``env.task`` not a registered environment, ``agent.task`` not
            a tool task of :mod:`verlog.agent.tasks`, or ``agent.agent`` not a loadable function.
    """
    if cfg.agent.credit not in CREDIT_MODES:
        raise ConfigError(f"agent.credit: expected one of {', '.join(CREDIT_MODES)}, got {cfg.agent.credit!r}")
    if cfg.agent.loop == "env" and not is_registered(cfg.env.task):
        raise ConfigError(f"env.task: expected a registered environment <family>/<task>, got {cfg.env.task!r}")
    if cfg.agent.loop != "env" and cfg.agent.task not in AGENT_TASKS:
        raise ConfigError(f"agent.task: expected one of {', '.join(sorted(AGENT_TASKS))}, got {cfg.agent.task!r}")
    if cfg.agent.loop == "proxy":
        try:
            load_agent_fn(cfg.agent.agent)
        except ValueError as exc:
            raise ConfigError(f"agent.agent: {exc}") from None
