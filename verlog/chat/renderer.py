"""Token-in/token-out bookkeeping of a chat through the tokenizer's own chat template.

The trajectory's ids are the engine's ids for assistant turns and, for messages the model did not
write (tool results, user turns), the tokens of their *delta* under the template: the conversation
rendered with the new messages minus the conversation rendered without them. The model's own output
is never tokenised again. :meth:`ChatRenderer.consistent` compares the accumulated ids with a full
re-render, so a template that rewrites history (e.g. drops old reasoning) is detected and reported.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ChatRenderer"]

Message = dict[str, Any]
_FALLBACK_BASE: list[Message] = [{"role": "user", "content": "."}]


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

    def render(self, messages: list[Message], add_generation_prompt: bool) -> str:
        """The template's text of ``messages`` (with the assistant header when asked)."""
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
