"""Benches measured in rounds: each round runs every path (or point) once, starting at another, so a VM's drift
(a third within a minute on some) hits them all alike and per-round ratios stay meaningful."""

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def round_order(items: Sequence[T], r: int) -> list[T]:
    """`items` in round `r`'s order: rotated to start at item r (modulo their number)."""
    start = r % len(items)
    return [*items[start:], *items[:start]]
