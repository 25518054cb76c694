"""Token-in/token-out bookkeeping of a chat through the tokenizer's own chat template.

The trajectory's ids are the engine's ids for assistant turns and, for messages the model did not
write (tool results, user turns), the tokens of their *delta* under the template: the conversation
rendered with the new messages minus the conversation rendered without them. The model's own output
is never tokenised again. :meth:`ChatRenderer.consistent` compares the accumulated ids with a full
re-render, so a template that rewrites history (e.g. drops old reasoning) is detected and reported.

Assistant messages with ``tool_calls`` (what an OpenAI client sends back after a call): many chat
templates of small models render only ``content`` and would show an empty assistant turn where the
call was. The renderer finds this out once per template by rendering a probe conversation
(:meth:`ChatRenderer.tool_calls_as_text`); for such a template each call is written into the message's
content as the Hermes ``<tool_call>`` block the model generates and :func:`~verlog.chat.parsing.parse_reply`
reads (:func:`tool_calls_into_content`). Templates that render the calls get the messages unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from verlog.chat.parsing import tool_call_text

__all__ = ["ChatRenderer", "tool_calls_into_content"]

Message = dict[str, Any]
_FALLBACK_BASE: list[Message] = [{"role": "user", "content": "."}]
_PROBE_NAME = "verlog_probe_function"
_PROBE_VALUE = "verlog-probe-value"
_PROBE: list[Message] = [
    {"role": "user", "content": "."},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_0", "type": "function",
         "function": {"name": _PROBE_NAME, "arguments": {"verlog_probe_argument": _PROBE_VALUE}}}]},
]


def _call_text(call: dict[str, Any]) -> str:
    """The Hermes block of one OpenAI tool call (``{"function": {"name", "arguments"}}`` or the function
    itself); arguments given as a JSON string are decoded first, and kept as the string when they are not
    JSON."""
    fn = call.get("function", call)
    arguments = fn.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            pass
    return tool_call_text(str(fn.get("name", "")), arguments)


def tool_calls_into_content(messages: list[Message]) -> list[Message]:
    """``messages`` with every assistant message's ``tool_calls`` written into its content: the content,
    then one :func:`~verlog.chat.parsing.tool_call_text` block per call, separated by newlines (the
    layout of Qwen2.5's template: ``"text\n<tool_call>...</tool_call>\n<tool_call>..."``, no leading
    newline without text), and the ``tool_calls`` key removed. Other messages are returned as they are
    (the same objects); the input is not modified."""
    out = []
    for message in messages:
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if not calls:
            out.append(message)
            continue
        content = message.get("content") or ""
        parts = ([content] if content else []) + [_call_text(call) for call in calls]
        out.append({k: v for k, v in message.items() if k != "tool_calls"} | {"content": "\n".join(parts)})
    return out


class ChatRenderer:
    """Renders and tokenises a conversation with a Hugging Face tokenizer's chat template.

    Args:
        tokenizer: a tokenizer with ``apply_chat_template``, ``encode``/``decode`` and an eos token.
        tools: OpenAI function entries passed to the template as ``tools`` (None or [] for none).
        chat_template: a template overriding the tokenizer's own (None: the tokenizer's).

    Raises:
        ValueError: the tokenizer has no eos token.
    """

    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]] | None = None,
                 chat_template: str | None = None) -> None:
        if tokenizer.eos_token is None:
            raise ValueError("ChatRenderer: the tokenizer has no eos token")
        self.tokenizer = tokenizer
        self.tools = tools or None
        self.chat_template = chat_template
        self.eos = str(tokenizer.eos_token)
        self.eos_id = int(tokenizer.eos_token_id)
        self._calls_as_text: bool | None = None  # probed on first need

    def with_tools(self, tools: list[dict[str, Any]] | None) -> "ChatRenderer":
        """A renderer of the same tokenizer and template with other ``tools``, sharing this one's probe
        result (:meth:`tool_calls_as_text`, probed here first if it was not yet)."""
        other = ChatRenderer(self.tokenizer, tools, self.chat_template)
        other._calls_as_text = self.tool_calls_as_text()
        return other

    def tool_calls_as_text(self) -> bool:
        """Whether this template drops assistant ``tool_calls``, so :meth:`render` writes them into the
        content (:func:`tool_calls_into_content`). Probed once per renderer: a conversation of a user
        turn and an assistant turn with one call and empty content is rendered, and the template drops
        the call when the rendering holds neither its function name nor its argument's value. A
        template that raises on the probe is taken to render calls (the messages are left as they are,
        and a request the template cannot render fails as it would without the probe)."""
        if self._calls_as_text is None:
            try:
                text = self._apply(_PROBE, False)
            except Exception:  # noqa: BLE001 - jinja errors: leave the messages to the template
                self._calls_as_text = False
            else:
                self._calls_as_text = _PROBE_NAME not in text and _PROBE_VALUE not in text
        return self._calls_as_text

    def rewrites_calls(self, messages: list[Message]) -> bool:
        """Whether :meth:`render` writes tool calls of ``messages`` into the content: one has
        ``tool_calls`` and the template drops them (:meth:`tool_calls_as_text`)."""
        return any(m.get("tool_calls") for m in messages) and self.tool_calls_as_text()

    def template_messages(self, messages: list[Message]) -> list[Message]:
        """``messages`` as handed to the template: unchanged, unless :meth:`rewrites_calls`; then with
        the calls written into the content."""
        return tool_calls_into_content(messages) if self.rewrites_calls(messages) else messages

    def render(self, messages: list[Message], add_generation_prompt: bool) -> str:
        """The template's text of ``messages`` (with the assistant header when asked); assistant
        ``tool_calls`` the template would drop are written into the content (:meth:`template_messages`)."""
        return self._apply(self.template_messages(messages), add_generation_prompt)

    def _apply(self, messages: list[Message], add_generation_prompt: bool) -> str:
        """The tokenizer's ``apply_chat_template`` text of ``messages`` with this renderer's tools and template."""
        kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": add_generation_prompt}
        if self.tools:
            kwargs["tools"] = self.tools
        if self.chat_template is not None:
            kwargs["chat_template"] = self.chat_template
        return self.tokenizer.apply_chat_template(messages, **kwargs)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added; special-token strings map to their ids)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids`` with special tokens kept (used to read replies, never to re-tokenise them)."""
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def prompt_ids(self, messages: list[Message]) -> list[int]:
        """Ids of the first prompt: ``messages`` rendered with the generation prompt."""
        return self.encode(self.render(messages, True))

    def continuation(self, history: list[Message], reply_ended: bool, new: list[Message]) -> tuple[str, bool]:
        """The text that follows the model's last token when ``new`` messages are appended.

        ``history`` ends with the assistant message just generated. The text is the template's
        glue after that reply (e.g. ``"\\n"`` after ``<|im_end|>``; the end token itself too when the
        reply was cut at a length limit and lacks it) plus the delta of ``new`` under the template,
        ending with the next assistant header.

        Args:
            history: the conversation so far, its last message the model's reply.
            reply_ended: the model's ids end with the eos token.
            new: the non-model messages to append (tool results, a user turn).

        Returns:
            (text, exact): exact is False when a fallback had to be used because the template does
            not render the longer conversation as an extension of the shorter one.
        """
        before = self.render(history, False)
        end = before.rfind(self.eos)
        glue = before[end + len(self.eos):] if end >= 0 else ""
        if not reply_ended:
            glue = self.eos + glue
        after = self.render(history + new, True)
        if after.startswith(before):
            return glue + after[len(before):], True
        base = self.render(_FALLBACK_BASE, False)
        return glue + self.render(_FALLBACK_BASE + new, True)[len(base):], False

    def consistent(self, messages: list[Message], ids: list[int], add_generation_prompt: bool) -> bool:
        """Whether ``ids`` agree with a full re-render + tokenisation of ``messages``.

        With the generation prompt the ids must equal the full tokenisation; without it (after the
        final reply) they must be its prefix, since the template's glue after the last end token was
        never generated.
        """
        full = self.encode(self.render(messages, add_generation_prompt))
        return full == ids if add_generation_prompt else full[: len(ids)] == ids
