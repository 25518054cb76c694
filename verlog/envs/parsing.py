"""Extract the chosen action from a model's raw reply.

The rule, in order:

1. **Marker.** Find the LAST action marker in the reply. A marker is the whole word ``action``
   (any case, possibly wrapped in markdown ``*``/``_``/backticks) followed by ``:`` or ``=``, or by a
   dash (``-``, en dash, em dash) that is followed by whitespace; BALROG's robust-agent tag
   ``<|ACTION|>`` also counts. Examples: ``ACTION: turn left``, ``**Action**: turn left``,
   ``Action - turn left``, ``action=turn_left``, ``<|ACTION|>turn left<|END|>``.
   The action is the text right after that marker: leading decoration (spaces, quotes, backticks,
   ``*``, brackets ...) is skipped, then the longest valid action whose *key* (see below) is a prefix
   of the following text's key **and ends at a word boundary** wins. Trailing text is ignored, so
   ``ACTION: turn left. Then I'll go forward`` gives ``turn left`` while ``ACTION: turn lefty`` and
   ``ACTION: I will turn left`` give ``None``. If the last marker is not followed by a valid action the
   result is ``None`` (earlier markers are not consulted: the last one is the model's final answer).
2. **No marker.** The whole reply must be exactly one valid action up to normalisation (its key equals
   an action's key), e.g. ``"Turn left."`` or ``` `go_forward` ```.

The *key* of a text is its NFKC-normalised, case-folded alphanumeric characters only, so case,
punctuation, underscores/hyphens vs spaces and missing spaces (``turnleft``) do not matter.

Only a window of the text after the marker is examined (a few times the longest action's length), so
the cost is linear in the reply length with a small constant. Short replies (``ACTION: up``, what a
trained agent mostly sends) are remembered per action set with what they gave, so a repeated one costs
a dict lookup. :func:`extract_action` never raises on
any ``str`` reply; it raises only for a bad ``valid_actions`` argument (a programming error).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import NamedTuple, Sequence

__all__ = ["extract_action", "reply_memo", "action_key", "after_last_marker"]

# The word "action" (not part of a longer word), optional markdown closers, then ':' or '=',
# or a dash followed by whitespace; or BALROG's "<|ACTION|>" tag.
_MARKER = re.compile(
    r"(?<![^\W_])action[*_`]*\s*(?:[:=]|[-\u2013\u2014](?=\s))|<\|action\|>",
    re.IGNORECASE,
)
# Leading decoration after a marker: anything that is not a letter or digit.
_LEADING_DECORATION = re.compile(r"[\W_]*")
# How many characters after the decoration are examined, per character of the longest action.
_WINDOW_FACTOR = 4
_WINDOW_SLACK = 16
# Replies up to this many characters are remembered (per action set), up to this many of them.
_MEMO_MAX_CHARS = 64
_MEMO_SIZE = 4096
_UNSEEN = object()


def action_key(text: str) -> str:
    """Return the matching key of ``text``: NFKC-normalised, case-folded, alphanumerics only.

    Args:
        text: any string.

    Returns:
        The key, e.g. ``action_key("Turn_Left!") == "turnleft"``.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in folded if ch.isalnum())


def after_last_marker(reply: str) -> str | None:
    """The text after the LAST action marker of ``reply`` (rule 1 of the module docstring), or ``None``
    when the reply holds no marker.

    Examples: ``after_last_marker("ACTION: up. Action: down") == " down"``,
    ``after_last_marker("go north") is None``.
    """
    last = None
    for last in _MARKER.finditer(reply):
        pass
    return reply[last.end() :] if last is not None else None


class _ActionTable(NamedTuple):
    """The matching tables of one action set (built once per set, see :func:`_action_table`)."""

    table: dict[str, str]  # key -> canonical action
    keys: tuple[str, ...]  # keys, longest first
    max_len: int  # length of the longest key
    ascii_prefix: re.Pattern[str]  # the prefix rule of :func:`_match_prefix` on an ASCII window
    memo: dict[str, str | None]  # short reply -> what :func:`_extract` gave for it


def _ascii_prefix_pattern(keys: tuple[str, ...]) -> re.Pattern[str]:
    """One regex doing :func:`_match_prefix`'s job on an ASCII window, where NFKC changes nothing and
    the key of a character is itself lower-cased if alphanumeric, else nothing.

    Alternative ``i`` (group ``i + 1``) is ``keys[i]`` spelled with any non-alphanumeric characters
    between its letters and followed by a word boundary; alternatives are tried longest key first, as
    in the generic loop, so the first alternative that matches is the action that loop finds.
    """
    between = "[^a-zA-Z0-9]*"
    alternatives = "|".join(f"({between.join(map(re.escape, key))})" for key in keys)
    return re.compile(f"(?:{alternatives})(?![a-zA-Z0-9])", re.IGNORECASE | re.ASCII)


@lru_cache(maxsize=256)
def _action_table(valid_actions: tuple[str, ...]) -> _ActionTable:
    """Map key -> canonical action; keys sorted longest first; longest key length; ASCII matcher.

    Raises:
        TypeError: if an action is not a ``str``.
        ValueError: if the set is empty, an action has an empty key, or two actions share a key.
    """
    if not valid_actions:
        raise ValueError("valid_actions is empty: there is nothing to match a reply against")
    table: dict[str, str] = {}
    for action in valid_actions:
        if not isinstance(action, str):
            raise TypeError(f"valid_actions must hold str, got {type(action).__name__}: {action!r}")
        key = action_key(action)
        if not key:
            raise ValueError(f"valid action {action!r} has no letters or digits, so it cannot be matched")
        if key in table and table[key] != action:
            raise ValueError(
                f"valid actions {table[key]!r} and {action!r} are indistinguishable after normalisation "
                f"(both become {key!r})"
            )
        table[key] = action
    keys = tuple(sorted(table, key=len, reverse=True))
    return _ActionTable(table, keys, len(keys[0]), _ascii_prefix_pattern(keys), {})


def _match_prefix(text: str, actions: _ActionTable) -> str | None:
    """Longest valid action whose key is a prefix of ``text``'s key and ends at a word boundary."""
    table, keys, max_len = actions.table, actions.keys, actions.max_len
    start = _LEADING_DECORATION.match(text).end()
    window = text[start : start + _WINDOW_FACTOR * max_len + _WINDOW_SLACK]
    if window.isascii():  # the common case, in one regex match
        found = actions.ascii_prefix.match(window)
        return table[keys[found.lastindex - 1]] if found else None
    window = unicodedata.normalize("NFKC", window)
    # Build the key of the window, remembering after which window character each key character ends.
    key_chars: list[str] = []
    key_end: list[int] = []  # key_end[k] = index in `window` just after the char giving key char k
    for idx, ch in enumerate(window):
        for c in ch.casefold():
            if c.isalnum():
                key_chars.append(c)
                key_end.append(idx + 1)
        if len(key_chars) > max_len:
            break
    key = "".join(key_chars)
    for candidate in keys:  # longest first
        n = len(candidate)
        if n <= len(key) and key.startswith(candidate):
            end = key_end[n - 1]
            if end >= len(window) or not window[end].isalnum():
                return table[candidate]
    return None


def extract_action(reply: str, valid_actions: Sequence[str]) -> str | None:
    """Return the canonical valid action chosen in ``reply``, or ``None`` if there is none.

    See the module docstring for the exact rule (last ``ACTION:``-style marker, else a reply that is
    exactly one action after normalisation).

    Args:
        reply: the model's raw reply; any ``str`` (empty, huge, binary, any unicode) is accepted.
        valid_actions: the canonical action strings, e.g. ``["turn left", "go forward"]``.

    Returns:
        The element of ``valid_actions`` that was chosen, or ``None``.

    Raises:
        TypeError: if ``reply`` is not a ``str``, ``valid_actions`` is a bare ``str``, or an action is
            not a ``str``.
        ValueError: if ``valid_actions`` is empty or two actions are equal after normalisation.
    """
    if not isinstance(reply, str):
        raise TypeError(f"reply must be a str, got {type(reply).__name__}")
    if isinstance(valid_actions, str):
        raise TypeError("valid_actions must be a sequence of action strings, not a single str")
    actions = _action_table(tuple(valid_actions))
    if len(reply) > _MEMO_MAX_CHARS or type(reply) is not str:  # a str subclass may compare otherwise
        return _extract(reply, actions)
    memo = actions.memo
    found = memo.get(reply, _UNSEEN)
    if found is _UNSEEN:
        if len(memo) >= _MEMO_SIZE:
            memo.clear()
        found = memo[reply] = _extract(reply, actions)
    return found


def reply_memo(valid_actions: Sequence[str]) -> dict[str, str | None]:
    """The short replies :func:`extract_action` has parsed against ``valid_actions``, each with the
    action it gave (or ``None``): filled by it, for a caller that parses many replies against one set
    to read (one dict lookup in place of a few calls; exact ``str`` replies only, as the memo keeps).
    An empty dict for a set :func:`extract_action` refuses (it raises at every call)."""
    try:
        return _action_table(tuple(valid_actions)).memo
    except (TypeError, ValueError):
        return {}


def _extract(reply: str, actions: _ActionTable) -> str | None:
    """The action of ``reply`` among ``actions`` (the rule of the module docstring), or ``None``."""
    answer = after_last_marker(reply)
    if answer is not None:
        return _match_prefix(answer, actions)
    # No marker: the whole reply must be one action. Cheap length guard before normalising.
    reply = reply.strip()
    if len(reply) > _WINDOW_FACTOR * actions.max_len + _WINDOW_SLACK:
        return None
    return actions.table.get(action_key(reply))
