"""The tool agent loop: generate, parse Hermes tool calls, run them concurrently, feed results back.

Token ids are built token-in/token-out (see :mod:`verlog.chat.renderer`): the engine's ids are
appended as they are (mask 1, with their logprobs) and only the delta of non-model messages is
tokenised (mask 0). After every step the ids are checked against a full re-render; a mismatch is
counted in ``Trajectory.stats["template_mismatches"]`` and the run goes on with the exact ids.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from verlog.chat.parsing import ToolCall, parse_reply
from verlog.chat.renderer import ChatRenderer
from verlog.chat.trajectory import AgentTurn, Trajectory
from verlog.rollout.engine import Generation, SamplingParams
from verlog.tools.base import BaseTool, ToolError, one_line
from verlog.tools.registry import ToolRegistry

__all__ = ["AgentLimits", "ToolAgentLoop", "TRUNCATION_MARKER"]

TRUNCATION_MARKER = "... (truncated {n} characters)"
RewardFn = Callable[[str | None, Trajectory], Any]
UserFn = Callable[[str, Trajectory], "str | None"]


@dataclass(frozen=True)
class AgentLimits:
    """The loop's separate limits (None: no limit).

    Attributes:
        max_response_tokens: most tokens the engine may generate in one assistant turn.
        max_total_tokens: most tokens of the whole trajectory (first prompt included); a turn
            generates at most what is left, and a tool/user delta that would not fit ends the run
            without being appended.
        max_assistant_turns: most assistant turns.
        max_tool_response_chars: longer tool responses keep this many characters plus
            :data:`TRUNCATION_MARKER` (counted in ``stats["truncated_tool_responses"]``).

    Raises:
        ValueError: a limit below 1.
    """

    max_response_tokens: int = 256
    max_total_tokens: int | None = 4096
    max_assistant_turns: int | None = 8
    max_tool_response_chars: int | None = 2000

    def __post_init__(self) -> None:
        for name in ("max_response_tokens", "max_total_tokens", "max_assistant_turns", "max_tool_response_chars"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"AgentLimits.{name} must be a positive int or None, got {value!r}")


class ToolAgentLoop:
    """Runs one conversation with tools to its end and returns a :class:`Trajectory`.

    Args:
        engine: a rollout engine, ``generate([prompt_ids], SamplingParams) -> [Generation]`` (sync,
            run in a worker thread, or async).
        tokenizer: the Hugging Face tokenizer whose chat template renders the conversation.
        tools: the tools offered to the model (a ToolRegistry or BaseTools).
        reward_fn: ``(final answer or None, trajectory) -> float``, the task reward; it may return
            an awaitable of the float (an async function), which is awaited.
        limits: see :class:`AgentLimits`.
        sampling: sampling settings; ``max_tokens`` is replaced per turn by the limits.
        user_fn: optional ``(final answer, trajectory) -> user text or None``: called when the model
            answers without a tool call; a text continues the conversation as a user turn.
        chat_template: overrides the tokenizer's template (None: use the tokenizer's).
        check_template: compare the ids with a full re-render after every step.
    """

    def __init__(self, engine: Any, tokenizer: Any, tools: ToolRegistry | Iterable[BaseTool] = (),
                 reward_fn: RewardFn | None = None, limits: AgentLimits = AgentLimits(),
                 sampling: SamplingParams = SamplingParams(), user_fn: UserFn | None = None,
                 chat_template: str | None = None, check_template: bool = True) -> None:
        self.engine = engine
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.reward_fn = reward_fn
        self.limits = limits
        self.sampling = sampling
        self.user_fn = user_fn
        self.check_template = check_template
        schemas = [tool.openai_schema() for tool in self.tools]
        self.chat = ChatRenderer(tokenizer, schemas, chat_template)

    async def run(self, messages: list[dict[str, Any]],
                  tool_kwargs: dict[str, dict[str, Any]] | None = None) -> Trajectory:
        """Run the conversation that starts with ``messages`` (system/user) to its end.

        Args:
            messages: the opening messages; not modified.
            tool_kwargs: per-tool ``create`` keyword arguments for this trajectory, by tool name.

        Returns:
            the trajectory, its ``reward`` set by ``reward_fn`` (0.0 without one).

        Raises:
            ValueError: the first prompt alone exceeds ``max_total_tokens``, or the engine returned
                no token or logprobs of another length.
            Exception: whatever a tool's ``create`` or the engine raises (tools already created
                are released first).
        """
        messages = [dict(m) for m in messages]
        prompt = self.chat.prompt_ids(messages)
        total = self.limits.max_total_tokens
        if total is not None and len(prompt) >= total:
            raise ValueError(f"the first prompt has {len(prompt)} tokens; max_total_tokens is {total}")
        traj = Trajectory(messages, len(prompt), [], [], [])
        traj.extend(prompt, 0)
        instances: dict[str, str] = {}
        try:
            instances.update(await self._create(tool_kwargs or {}))
            await self._loop(traj, instances)
        finally:
            await asyncio.gather(*(self.tools[n].release(i) for n, i in instances.items()),
                                 return_exceptions=True)
        if self.reward_fn is not None:
            reward = self.reward_fn(traj.answer, traj)
            traj.reward = float(await reward if inspect.isawaitable(reward) else reward)
        return traj

    async def _create(self, tool_kwargs: dict[str, dict[str, Any]]) -> dict[str, str]:
        names = self.tools.names()
        created: dict[str, str] = {}
        try:
            for name in names:
                created[name] = await self.tools[name].create(**tool_kwargs.get(name, {}))
        except BaseException:
            await asyncio.gather(*(self.tools[n].release(i) for n, i in created.items()), return_exceptions=True)
            raise
        return created

    async def _loop(self, traj: Trajectory, instances: dict[str, str]) -> None:
        limits = self.limits
        while True:
            if limits.max_assistant_turns is not None and len(traj.turns) >= limits.max_assistant_turns:
                traj.stop_reason = "max_turns"
                return
            room = limits.max_response_tokens
            budget_bound = False
            if limits.max_total_tokens is not None and limits.max_total_tokens - len(traj.ids) < room:
                room, budget_bound = limits.max_total_tokens - len(traj.ids), True
            if room < 1:
                traj.stop_reason = "max_total_tokens"
                return
            gen = await self._generate(traj.ids, room)
            turn = self._append_reply(traj, gen)
            parsed = parse_reply(traj.messages[-1]["content"])
            turn.calls = parsed.calls
            if not parsed.calls:
                user = self.user_fn(parsed.content, traj) if self.user_fn is not None else None
                if user is None:
                    traj.answer = parsed.content
                    cut_by_budget = budget_bound and gen.finish_reason == "length"
                    traj.stop_reason = "max_total_tokens" if cut_by_budget else "answer"
                    self._check(traj, add_generation_prompt=False)
                    return
                new = [{"role": "user", "content": user}]
            else:
                new = await self._run_calls(traj, turn, instances)
            if not self._append_observation(traj, new, self._ended(gen)):
                traj.stop_reason = "max_total_tokens"
                return

    async def _generate(self, ids: list[int], max_tokens: int) -> Generation:
        params = SamplingParams(max_tokens=max_tokens, temperature=self.sampling.temperature,
                                top_p=self.sampling.top_p, top_k=self.sampling.top_k,
                                greedy=self.sampling.greedy, seed=self.sampling.seed)
        if inspect.iscoroutinefunction(self.engine.generate):
            out = await self.engine.generate([list(ids)], params)
        else:
            out = await asyncio.to_thread(self.engine.generate, [list(ids)], params)
        gen = out[0]
        if not gen.token_ids or len(gen.logprobs) != len(gen.token_ids):
            raise ValueError(f"engine returned {len(gen.token_ids)} ids and {len(gen.logprobs)} logprobs")
        return gen

    def _ended(self, gen: Generation) -> bool:
        return gen.token_ids[-1] == self.chat.eos_id

    def _append_reply(self, traj: Trajectory, gen: Generation) -> AgentTurn:
        """Append the engine's ids exactly (mask 1) and the decoded reply as the assistant message."""
        start = len(traj.ids)
        traj.extend(list(gen.token_ids), 1, list(gen.logprobs))
        text = self.chat.decode(list(gen.token_ids))
        turn = AgentTurn(start, len(traj.ids), text, gen.finish_reason)
        traj.turns.append(turn)
        if gen.finish_reason == "length":
            traj.count("cut_turns")
        content = text[: -len(self.chat.eos)] if self._ended(gen) and text.endswith(self.chat.eos) else text
        traj.messages.append({"role": "assistant", "content": content})
        return turn

    def _append_observation(self, traj: Trajectory, new: list[dict[str, Any]], reply_ended: bool) -> bool:
        """Append the mask-0 delta of ``new``; False (nothing appended) when it would not fit."""
        text, exact = self.chat.continuation(traj.messages, reply_ended, new)
        if not exact:
            traj.count("template_fallbacks")
        ids = self.chat.encode(text)
        total = self.limits.max_total_tokens
        if total is not None and len(traj.ids) + len(ids) >= total:
            return False
        traj.extend(ids, 0)
        traj.messages.extend(new)
        self._check(traj, add_generation_prompt=True)
        return True

    def _check(self, traj: Trajectory, add_generation_prompt: bool) -> None:
        if self.check_template and not self.chat.consistent(traj.messages, traj.ids, add_generation_prompt):
            traj.count("template_mismatches")
            traj.mismatch_steps.append(len(traj.turns) - 1)

    async def _run_calls(self, traj: Trajectory, turn: AgentTurn,
                         instances: dict[str, str]) -> list[dict[str, Any]]:
        """Run every call of the turn concurrently; one ``tool`` message per call, in order."""
        results = await asyncio.gather(*(self._call(traj, call, instances) for call in turn.calls))
        limit = self.limits.max_tool_response_chars
        messages = []
        for text, reward in results:
            if limit is not None and len(text) > limit:
                text = text[:limit] + TRUNCATION_MARKER.format(n=len(text) - limit)
                traj.count("truncated_tool_responses")
            turn.responses.append(text)
            turn.tool_reward += reward
            messages.append({"role": "tool", "content": text})
        return messages

    async def _call(self, traj: Trajectory, call: ToolCall, instances: dict[str, str]) -> tuple[str, float]:
        """(response text, reward) of one call; every failure becomes an ``Error: ...`` text."""
        traj.count("tool_calls")
        if call.error is not None:
            traj.count("malformed_calls")
            return self._error(traj, call.error), 0.0
        if call.name not in instances:
            traj.count("unknown_tools")
            known = ", ".join(instances) or "none"
            return self._error(traj, f"unknown tool '{call.name}' (available: {known})"), 0.0
        tool = self.tools[call.name]
        try:
            result = await tool.execute(instances[call.name], call.arguments)
        except ToolError as exc:
            return self._error(traj, exc.message), 0.0
        except Exception as exc:  # a BaseTool that raised something else: the model still hears it
            return self._error(traj, f"tool '{call.name}' failed: {type(exc).__name__}: {exc}"), 0.0
        return result.text, result.reward

    @staticmethod
    def _error(traj: Trajectory, message: str) -> str:
        traj.count("tool_errors")
        return "Error: " + one_line(message)
