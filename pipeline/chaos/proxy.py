"""A loopback TCP proxy the nemesis can cut: one client cut off from the cluster (#11).

The gateway under test reaches its broker only through this proxy: its ``bootstrap`` is the
proxy's port, and the broker has a listener of its own for that client whose *advertised*
address is the proxy too (``LauncherConfig.extra_listeners``), so the metadata the broker returns
on that listener sends the client's reconnects back through the proxy, never around it.

A cut is a partition, not a reset: bytes already read are held, not dropped, and nothing is
relayed or connected upstream until the heal, as when packets stop flowing and TCP retransmits
later. The client sees requests time out and reconnects that hang, never a quick RST; what it
gave up on meanwhile it has closed itself. The heal lets everything still open flow again.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

_CHUNK = 65536


class CutProxy:
    """``127.0.0.1:listen_port`` -> ``127.0.0.1:target_port``, in a thread with its own loop."""

    def __init__(self, listen_port: int, target_port: int) -> None:
        self.listen_port = listen_port
        self.target_port = target_port
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._open = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="chaos-proxy", daemon=True
        )

    def start(self) -> CutProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)
        return self

    async def _serve(self) -> None:
        self._open.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.listen_port)

    @property
    def is_cut(self) -> bool:
        return not self._open.is_set()

    def cut(self) -> None:
        self._loop.call_soon_threadsafe(self._open.clear)

    def heal(self) -> None:
        self._loop.call_soon_threadsafe(self._open.set)

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        up_writer: asyncio.StreamWriter | None = None
        try:
            await self._open.wait()  # a connect during a cut hangs, as a SYN into a partition
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    w.close()
            self._tasks.discard(task)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(_CHUNK):
                await self._open.wait()  # held during a cut, delivered after the heal
                dst.write(data)
                await dst.drain()
        finally:
            dst.close()


@contextlib.contextmanager
def running(listen_port: int, target_port: int) -> Iterator[CutProxy]:
    proxy = CutProxy(listen_port, target_port).start()
    try:
        yield proxy
    finally:
        proxy.stop()
