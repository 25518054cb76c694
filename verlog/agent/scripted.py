"""Scripted replies through the real agent loop: the prompts a format warm-up trains on.

:class:`ScriptedEngine` "generates" fixed reply texts (tokenised, plus the end token) instead of
sampling; running :class:`~verlog.agent.loop.ToolAgentLoop` with it yields the exact prompt ids the
loop builds in training after those replies. :func:`scripted_examples` turns several scripts of one
conversation into warm-up examples: each distinct prompt with the replies the scripts give there.
"""

from __future__ import annotations

from typing import Any, Callable

from verlog.rollout.engine import Generation, SamplingParams
from verlog.warmup import WarmupExample

__all__ = ["ScriptedEngine", "scripted_examples"]


class ScriptedEngine:
    """Replies with ``replies[k]`` on its k-th call (one prompt per call), logprob 0 per token.

    Args:
        tokenizer: encodes the replies (no special tokens added); its eos ends each reply.
        replies: the reply texts in order.

    Raises:
        IndexError: (from :meth:`generate`) more calls than replies.
    """

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.calls = 0

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        out = []
        for _ in prompts:
            if self.calls >= len(self.replies):
                raise IndexError(f"ScriptedEngine: call {self.calls + 1} but only {len(self.replies)} replies")
            ids = list(self.tokenizer.encode(self.replies[self.calls], add_special_tokens=False))
            ids.append(int(self.tokenizer.eos_token_id))
            self.calls += 1
            out.append(Generation(ids, [0.0] * len(ids), "stop"))
        return out


async def scripted_examples(tokenizer: Any, make_loop: Callable[[Any], Any], messages: list[dict[str, Any]],
                            scripts: list[list[str]]) -> list[WarmupExample]:
    """Warm-up examples of one conversation: run ``make_loop(engine)`` (a
    :class:`~verlog.agent.loop.ToolAgentLoop` on that engine) once per script with a
    :class:`ScriptedEngine`, and for every assistant turn of every script give the prompt before it
    with all the replies the scripts make after that same prompt.

    A prompt that k scripts share (e.g. the first one) is returned k times, so a uniform draw over
    the examples trains each prompt as often as the scripts reach it; its replies are then drawn
    uniformly (so the warm-up favours none of them).

    Returns:
        one example per (script, turn), in script order; replies unique, in script order.

    Raises:
        ValueError: a script's run ended before all its replies were used (a limit or an answer came
            first), so its later replies would train on prompts the loop never builds.
    """
    by_prompt: dict[tuple[int, ...], list[str]] = {}
    order: list[tuple[int, ...]] = []
    for script in scripts:
        engine = ScriptedEngine(tokenizer, script)
        traj = await make_loop(engine).run(messages)
        if len(traj.turns) != len(script):
            raise ValueError(f"scripted_examples: the loop ran {len(traj.turns)} turns ({traj.stop_reason}) "
                             f"for a script of {len(script)} replies")
        for turn, reply in zip(traj.turns, script):
            prompt = tuple(traj.ids[: turn.start])
            replies = by_prompt.setdefault(prompt, [])
            if reply not in replies:
                replies.append(reply)
            order.append(prompt)
    return [WarmupExample(list(p), by_prompt[p]) for p in order]
