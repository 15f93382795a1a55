"""A Server-Sent Events server for the tests: sse-starlette under uvicorn, on a thread of the
test process, on 127.0.0.1 on a free port (ended by that thread: ``stop()``).

``/events`` sends events with ids 1, 2, 3, ... (after the request's ``Last-Event-ID``, so a
reconnection or a restarted reader goes on where it left off), each ``data`` a JSON object
``{"id": n, "pad": "..."}``. Query parameters: ``count`` (the last id; endless without),
``size`` (characters of padding), ``close_after`` (the server ends the response after that
many events, as a server that drops connections would), ``retry`` (milliseconds, sent
first). :attr:`SseServer.produced` counts the events the server's generator has handed to
uvicorn: uvicorn waits for the socket to drain, so while a reader does not read, it stops
growing. ``/private`` is ``/events`` behind ``Authorization: Bearer <token>``; ``/plain``
answers text/plain; ``/gone`` answers 204.

Run as a script to serve until interrupted (``python tests/peers/sse_server.py``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from ports import free_port  # tests/peers
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

__all__ = ["SseServer"]


class SseServer:
    """``start()`` it, ``stop()`` it; a context manager too."""

    def __init__(self, token: str = "s3cret-token") -> None:
        self.token = token
        self.port = free_port()
        self.produced = 0
        self.last_event_ids: list[str | None] = []
        self._lock = threading.Lock()
        app = Starlette(routes=[Route("/events", self._events), Route("/private", self._private),
                                Route("/plain", self._plain), Route("/gone", self._gone)])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                     log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, daemon=True,
                                        name="sse-test-server")

    def url(self, path: str = "/events", **query: Any) -> str:
        tail = "&".join(f"{k}={v}" for k, v in query.items())
        return f"http://127.0.0.1:{self.port}{path}" + (f"?{tail}" if tail else "")

    def start(self, timeout: float = 20.0) -> SseServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the SSE server did not start on port {self.port}")
            self._thread.join(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)

    def __enter__(self) -> SseServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _events(self, request: Request) -> Response:
        return EventSourceResponse(self._generate(request), ping=None, send_timeout=None)

    async def _private(self, request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return PlainTextResponse("no", status_code=401)
        return await self._events(request)

    async def _plain(self, request: Request) -> Response:
        return PlainTextResponse("not an event stream")

    async def _gone(self, request: Request) -> Response:
        return Response(status_code=204)

    async def _generate(self, request: Request) -> AsyncIterator[dict[str, Any]]:
        given = request.headers.get("last-event-id")
        with self._lock:
            self.last_event_ids.append(given)
        query = request.query_params
        count = int(query["count"]) if "count" in query else None
        pad = "x" * int(query.get("size", "0"))
        close_after = int(query["close_after"]) if "close_after" in query else None
        if "retry" in query:
            yield {"comment": "retry", "retry": int(query["retry"])}
        n = int(given) if given else 0
        sent = 0
        while count is None or n < count:
            n += 1
            yield {"id": str(n), "data": json.dumps({"id": n, "pad": pad})}
            sent += 1
            with self._lock:
                self.produced += 1
            # Let the loop run its other tasks (uvicorn's send yields only while the
            # socket is paused): among them sse-starlette's watch for a client gone.
            await asyncio.sleep(0)
            if close_after is not None and sent >= close_after:
                return


if __name__ == "__main__":
    with SseServer() as server:
        print(f"serving {server.url()} (Ctrl-C ends it)", flush=True)
        threading.Event().wait()
