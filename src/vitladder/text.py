"""Text that comes from data (class-folder and file names) made safe to show on one line."""

from __future__ import annotations


def printable(text: object, limit: int | None = None) -> str:
    """``text`` with control characters escaped (a newline as ``\\n``), past ``limit`` characters cut short."""
    shown = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(text))
    if limit is not None and len(shown) > limit:
        return shown[: max(limit - 1, 0)] + "…"
    return shown
