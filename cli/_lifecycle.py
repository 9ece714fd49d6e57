"""`async with` for the CLI's long-running pieces (the dev stack, the simulated fleet): start on
entry, undo a start that failed half-way, stop on exit."""

from __future__ import annotations

from typing import Self

__all__ = ["AsyncRunning"]


class AsyncRunning:
    """`async with x:` awaits `x._start()` (and `x._stop()` if it fails), then `x._stop()` at the
    end of the block. `_stop` must undo any part of a start."""

    async def _start(self) -> None:
        raise NotImplementedError

    async def _stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        try:
            await self._start()
        except BaseException:
            await self._stop()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stop()
