"""The terminal parts of the NetHack text (see :mod:`verlog.envs.nethack_text`): the map, the message,
the ``--More--`` prompts, the inventory, and the four parts joined under their headers.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = [
    "MORE",
    "render_map",
    "decode_message",
    "find_more",
    "more_text",
    "render_inventory",
    "render_observation",
]

#: The prompt NetHack shows when a message or text window goes on.
MORE = b"--More--"
_SWAP_SPACE_NUL = bytes.maketrans(b" \0", b"\0 ")


def render_map(tty_chars: np.ndarray) -> str:
    """The terminal without its first (message) line, one line per row, trailing spaces removed.

    Args:
        tty_chars: NLE's ``tty_chars``, shape ``(24, 80)`` uint8.

    Raises:
        ValueError: if ``tty_chars`` is not a 2-D uint8 array with at least 2 rows.
    """
    if tty_chars.ndim != 2 or tty_chars.dtype != np.uint8 or tty_chars.shape[0] < 2 or tty_chars.shape[1] < 1:
        raise ValueError(f"tty_chars must be a (rows, columns) uint8 array, got {tty_chars.dtype} {tty_chars.shape}")
    # Trailing spaces are cut in C, not per line in Python: spaces and NULs swap places, numpy's
    # fixed-width bytes type drops each row's trailing NULs (the spaces) when making bytes objects, and
    # the swap is undone on the joined text (so NULs of the screen are kept, as by rstrip(b" ")).
    swapped = tty_chars[1:].tobytes().translate(_SWAP_SPACE_NUL)
    rows = np.frombuffer(swapped, dtype=f"S{tty_chars.shape[1]}").tolist()
    return b"\n".join(rows).translate(_SWAP_SPACE_NUL).decode("latin-1")


def decode_message(message: np.ndarray) -> str:
    """NLE's ``message`` (NUL-terminated bytes) as text."""
    return message.tobytes().split(b"\0", 1)[0].decode("latin-1").strip()


def find_more(tty_chars: np.ndarray) -> tuple[int, int] | None:
    """``(row, column)`` of ``--More--`` on the terminal, or ``None``."""
    pos = tty_chars.tobytes().find(MORE)
    if pos < 0:
        return None
    return divmod(pos, tty_chars.shape[1])


def more_text(tty_chars: np.ndarray, row: int, col: int) -> str:
    """The text a ``--More--`` at ``(row, col)`` dismisses.

    On the message line (``row == 0``) it is the line's text before ``--More--``; lower down it ends a
    text window whose left edge is the ``--More--`` column: the window's rows above it, from that column.
    """
    if row == 0:
        return tty_chars[0, :col].tobytes().decode("latin-1").strip()
    lines = [line.tobytes().decode("latin-1").rstrip() for line in tty_chars[:row, col:]]
    return "\n".join(lines).strip("\n")


def render_inventory(inv_letters: np.ndarray, inv_strs: np.ndarray) -> str:
    """``Inventory:`` then ``<letter>: <item>`` per item (``(empty)`` when there is none).

    Args:
        inv_letters: NLE's ``inv_letters``, shape ``(55,)`` uint8, 0 after the last item.
        inv_strs: NLE's ``inv_strs``, shape ``(55, 80)`` uint8, NUL-terminated strings.
    """
    lines = ["Inventory:"]
    for letter, text in zip(inv_letters.tolist(), inv_strs):
        if letter == 0:
            break
        item = text.tobytes().split(b"\0", 1)[0].decode("latin-1")
        lines.append(f"{chr(letter)}: {item}")
    if len(lines) == 1:
        lines.append("(empty)")
    return "\n".join(lines)


def render_observation(message: str, description: Sequence[str], cursor: str, ascii_map: str) -> str:
    """Join the four parts under their headers (see the module docstring)."""
    return (
        f"message:\n{message or '(none)'}\n\n"
        f"language observation:\n{chr(10).join(description) or '(nothing noteworthy)'}\n\n"
        f"cursor:\n{cursor}\n\n"
        f"map:\n{ascii_map}"
    )
