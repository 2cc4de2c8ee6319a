"""The clock and sleeper, injected everywhere time passes, so hours of lab time test in milliseconds."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch, for records people read."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class VirtualClock:
    """Time that passes only when someone sleeps or a simulated device works.

    Each simulated device owns one, so devices run concurrently without sharing a timeline.
    """

    def __init__(self, start: float = 0.0, epoch: float | None = None):
        self.t = start
        self.epoch = time.time() if epoch is None else epoch

    def now(self) -> float:
        return self.t

    def wall(self) -> float:
        return self.epoch + self.t

    def advance(self, seconds: float) -> None:
        self.t += max(0.0, seconds)

    async def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        await asyncio.sleep(0)  # let the other sessions run
