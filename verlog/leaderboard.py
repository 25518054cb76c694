"""Reference rows printed beside a BALROG suite evaluation: published leaderboard scores and the
random-action floor, per suite env, as plain data.

Scores are BALROG progression in percent (for BabyAI: the share of episodes solved). The leaderboard
rows are zero-shot language models as BALROG's public leaderboard (balrogai.com, text-only track)
lists them, read for this project in November 2026; the floor is Verlog's own measurement with
``verlog-eval random suite=balrog envs=babyai episodes_per_task=100`` (2026-11-26; docs/balrog.md).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LEADERBOARD", "LEADERBOARD_SOURCE", "RANDOM_FLOOR", "Reference", "reference_lines"]

LEADERBOARD_SOURCE = "BALROG leaderboard (balrogai.com, text-only track), read 2026-11"


@dataclass(frozen=True)
class Reference:
    """One reference row: who, and the score in percent (with its standard error when published)."""

    name: str
    score: float
    se: float | None = None


#: suite env -> leaderboard rows, best first.
LEADERBOARD: dict[str, tuple[Reference, ...]] = {
    "babyai": (
        Reference("Gemini-2.5-Pro", 80.0),
        Reference("GPT-4o", 77.6),
        Reference("Grok-4", 76.0),
        Reference("DeepSeek-R1", 74.0),
        Reference("Llama-3.1-70B-Instruct", 73.2),
        Reference("Llama-3.2-90B-Instruct", 72.0),
        Reference("Llama-3.2-3B-Instruct", 20.0),
        Reference("Llama-3.2-1B-Instruct", 8.0),
    ),
}

#: suite env -> the uniformly random valid-action floor on BALROG's levels (500 episodes for BabyAI).
RANDOM_FLOOR: dict[str, Reference] = {
    "babyai": Reference("random valid actions (Verlog, 2026-11-26)", 9.4, 1.3),
}


def reference_lines(env: str, score: float) -> list[str]:
    """The leaderboard rows and the random floor of suite env ``env`` as printable lines, each marked
    with whether ``score`` (percent) is above it; ``[]`` for an env without references."""
    rows = list(LEADERBOARD.get(env, ()))
    if env in RANDOM_FLOOR:
        rows.append(RANDOM_FLOOR[env])
    if not rows:
        return []
    lines = [f"  reference ({LEADERBOARD_SOURCE}; floor measured by Verlog):"]
    for ref in rows:
        se = f" ± {ref.se:.1f}" if ref.se is not None else ""
        mark = "below this run" if score > ref.score else "at or above this run"
        lines.append(f"    {ref.name:<42} {ref.score:6.1f} %{se}  ({mark})")
    return lines
