"""A TCP relay that loses replies, for ambiguous failures on demand.

It forwards every byte a client sends to the real server (Redis, MySQL, the moto
SQS server), so the server does the work; what it does with the answer is up
to the caller:

- ``drop_replies``: the next N answers (or all of them, with ``FOREVER``) are
  thrown away and the client's connection is closed, exactly what a client
  sees when the network fails after its request went out;
- ``drop_chance``: each answer is lost with this probability (chaos runs);
- ``only_after``: if set, only answers to requests containing these bytes are
  lost (e.g. ``b"EVALSHA"``: the connection handshake goes through);
- ``go_down()``: every connection is cut and new ones are refused until
  ``come_back()`` (the server is unreachable; nothing more reaches it).
"""

from __future__ import annotations

import contextlib
import random
import selectors
import socket
import threading
from types import TracebackType

FOREVER = -1


class LossyProxy:
    def __init__(self, upstream_host: str, upstream_port: int, *, seed: int | None = None) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.drop_replies = 0
        self.drop_chance = 0.0
        self.only_after: bytes | None = None
        self.refuse = False
        self.dropped = 0  # answers lost so far
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._open: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._accept, name=f"lossy-proxy-{self.port}", daemon=True)
        self._thread.start()

    @property
    def url_host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def go_down(self) -> None:
        with self._lock:
            self.refuse = True
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def come_back(self) -> None:
        self.refuse = False

    def _lose_this_reply(self, request: bytes) -> bool:
        with self._lock:
            if self.only_after is not None and self.only_after not in request:
                return False
            lose = self.drop_replies != 0 or (self.drop_chance > 0 and self._rng.random() < self.drop_chance)
            if lose:
                self.dropped += 1
                if self.drop_replies > 0:
                    self.drop_replies -= 1
            return lose

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.refuse:
                client.close()
                continue
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            client.close()
            return
        with self._lock:
            self._open.update((client, server))
        request = b""  # what the client sent since the last answer
        try:
            with client, server, selectors.DefaultSelector() as sel:
                sel.register(client, selectors.EVENT_READ, server)
                sel.register(server, selectors.EVENT_READ, client)
                while not self._closed.is_set():
                    for key, _ in sel.select(timeout=0.2):
                        source: socket.socket = key.fileobj  # type: ignore[assignment]
                        try:
                            data = source.recv(65536)
                        except OSError:
                            return
                        if not data:
                            return
                        if source is client:
                            request += data
                        else:
                            if self._lose_this_reply(request):
                                return  # the server did the work; its answer never arrives
                            request = b""
                        try:
                            key.data.sendall(data)
                        except OSError:
                            return
        finally:
            with self._lock:
                self._open.difference_update((client, server))

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            # Closing alone leaves accept() blocked until the join gives up; shutdown wakes it.
            self._listener.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._listener.close()
        self._thread.join(timeout=2)

    def __enter__(self) -> LossyProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
