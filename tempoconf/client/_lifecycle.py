"""`with client:` and `async with client:` for every SDK object that watches: start on entry,
close on exit."""

from __future__ import annotations

from typing import Self

__all__ = ["AsyncClosing", "AsyncWatching", "Watching"]


class Watching:
    """`with x:` runs `x.start()`, and `x.close()` at the end of the block."""

    def start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncClosing:
    """`async with x:` ends with `await x.aclose()`."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class AsyncWatching(AsyncClosing):
    """`async with x:` runs `x.start()` (in the running loop), and `await x.aclose()` at the end."""

    def start(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        self.start()
        return self
