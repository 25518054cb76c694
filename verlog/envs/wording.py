"""English wording shared by the games' observation texts."""

from __future__ import annotations

__all__ = ["steps"]


def steps(n: int) -> str:
    """A count of grid steps: ``"1 step"``, else ``"<n> steps"`` (``steps(3) == "3 steps"``)."""
    return f"{n} step" if n == 1 else f"{n} steps"
