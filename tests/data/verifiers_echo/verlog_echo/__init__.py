"""A one-turn echo taskset (verifiers 0.4.0): the model is asked to repeat a word; reward 1 when its
last reply contains it."""

from verlog_echo.taskset import EchoTaskset

__all__ = ["EchoTaskset"]
