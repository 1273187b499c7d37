"""One GPU process serving the releases of CPU-only worker processes.

``privatize_dataset(..., num_proc=P)`` on a CUDA device: the ``P`` worker processes of ``Dataset.map``
tokenize, classify and decode (the host work, which bounds the end-to-end rate), and send each batch's
candidate positions with their rows' Philox keys to the parent process, which alone holds the GPU and runs
the release for every worker. A token's draws depend on its key and position only
(docs/mechanisms/randomness.md), so a batch released here, together with other workers' batches, gets
exactly the tokens it would get in the worker itself. The seed never crosses: workers derive their rows'
keys themselves and send keys, sizes and positions (no text). The socket lives in a private folder
(mode 0700) and the connection is authenticated with a random key handed to the workers through
:data:`ENV` (inherited by the spawned workers only for the duration of the run).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection, Listener, wait
from typing import Any

import numpy as np

from .. import settings
from ..utils.logging import get_logger
from ..utils.release_client import ENV, RemoteRelease, _clients, is_service_worker, remote_release


# the name its log lines have always carried (issue 38 moved the module)
logger = get_logger("hf_textdp.utils.release_service")

__all__ = ["ENV", "GATHER_ENV", "ReleaseService", "RemoteRelease", "is_service_worker", "remote_release", "serving"]

#: after a batch arrives, wait up to this long for other workers' batches to
#: release them in the same call (default 0: release what is waiting)
GATHER_ENV = settings.RELEASE_GATHER_MS

#: the release the service runs: (keys [R] int64, sizes [R] int64, positions [N] int64) -> result [N] or [N, k]
Handler = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


class ReleaseService:
    """Accepts worker connections and answers their release requests, several workers' batches in one call.

    One thread accepts connections; one serves them: it waits until some workers have sent a batch,
    concatenates those batches, runs ``handler`` once on the whole and sends each worker its part.
    An exception in ``handler`` is sent to each worker of that call, which raises it.
    """

    def __init__(self, handler: Handler, gather_s: float | None = None) -> None:
        self._handler = handler
        self.gather_s = settings.release_gather_s() if gather_s is None else gather_s
        self._dir = tempfile.mkdtemp(prefix="hf-textdp-release-")  # mode 0700
        self.address = os.path.join(self._dir, "socket")
        self.authkey = secrets.token_bytes(32)
        self._listener = Listener(self.address, family="AF_UNIX", authkey=self.authkey)
        self._conns: list[Connection] = []
        self._new: list[Connection] = []
        self._guard = threading.Lock()
        self._stopping = threading.Event()
        self.calls = 0
        self.batches = 0
        self.tokens = 0
        self.busy_s = 0.0  # time in the handler
        self.first_s: float | None = None  # the first and last request's arrival, from the start
        self.last_s = 0.0
        self._started = time.perf_counter()
        self._threads = [
            threading.Thread(target=self._accept, name="hf-textdp-accept", daemon=True),
            threading.Thread(target=self._serve, name="hf-textdp-release", daemon=True),
        ]
        for t in self._threads:
            t.start()

    @property
    def env_value(self) -> str:
        return f"{self.address}:{self.authkey.hex()}"

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                conn = self._listener.accept()
            except Exception:  # noqa: BLE001 - closed, a client that failed authentication, or the wake-up
                continue
            with self._guard:
                self._new.append(conn)

    def _serve(self) -> None:
        while not self._stopping.is_set():
            with self._guard:
                self._conns += self._new
                self._new.clear()
            if not self._conns:
                self._stopping.wait(0.01)
                continue
            requests: list[tuple[Connection, Any]] = []
            self._read(wait(self._conns, timeout=0.05), requests)
            if requests and self.gather_s > 0:  # a short wait for the other workers' batches
                deadline = time.perf_counter() + self.gather_s
                while (left := deadline - time.perf_counter()) > 0:
                    asked = {id(conn) for conn, _ in requests}
                    waiting = [conn for conn in self._conns if id(conn) not in asked]
                    if not waiting:
                        break
                    self._read(wait(waiting, timeout=left), requests)
            if requests:
                self._answer(requests)

    def _read(self, ready: list[Any], requests: list[tuple[Connection, Any]]) -> None:
        """Receive the batch of each ready connection into ``requests`` (a finished worker is dropped, a
        malformed request answered with an error)."""
        for conn in ready:
            assert isinstance(conn, Connection)
            try:
                request = conn.recv()
            except (EOFError, OSError):  # the worker finished
                self._drop(conn)
                continue
            if _well_formed(request):
                requests.append((conn, request))
            else:  # not a worker of this package: it gets an error, the others go on
                self._send(conn, ("error", TypeError(_MALFORMED)))

    def _answer(self, requests: list[tuple[Connection, Any]]) -> None:
        self.last_s = time.perf_counter() - self._started
        if self.first_s is None:
            self.first_s = self.last_s
        keys = np.concatenate([r[0] for _, r in requests])
        sizes = np.concatenate([r[1] for _, r in requests])
        positions = np.concatenate([r[2] for _, r in requests])
        t0 = time.perf_counter()
        try:
            result: Any = self._handler(keys, sizes, positions)
        except Exception as exc:  # the workers raise it: their map fails as a local release would
            for conn, _ in requests:
                self._send(conn, ("error", exc))
            return
        self.busy_s += time.perf_counter() - t0
        self.calls += 1
        self.batches += len(requests)
        self.tokens += int(positions.shape[0])
        start = 0
        for conn, (_, _, pos) in requests:
            self._send(conn, ("ok", result[start : start + pos.shape[0]]))
            start += pos.shape[0]

    def _send(self, conn: Connection, message: tuple[str, Any]) -> None:
        try:
            conn.send(message)
        except OSError:  # the worker has gone (its pool was terminated): nobody waits for the answer
            self._drop(conn)
        except Exception as exc:  # noqa: BLE001 - an error that does not pickle: its text still reaches the worker
            self._send(conn, ("error", RuntimeError(f"{type(message[1]).__name__}: {message[1]} ({exc})")))

    def _drop(self, conn: Connection) -> None:
        if conn in self._conns:
            self._conns.remove(conn)
        conn.close()

    def close(self) -> None:
        self._stopping.set()
        with socket.socket(socket.AF_UNIX) as wake:  # wakes the accepting thread (its handshake fails)
            try:
                wake.connect(self.address)
            except OSError:
                pass
        self._listener.close()
        for t in self._threads:
            t.join(timeout=5)
        for conn in self._conns + self._new:
            conn.close()
        shutil.rmtree(self._dir, ignore_errors=True)
        logger.info(
            "release service: %d batches in %d calls, %d tokens; releasing %.2f s of %.2f s (first batch after "
            "%.2f s, last after %.2f s)",
            self.batches,
            self.calls,
            self.tokens,
            self.busy_s,
            time.perf_counter() - self._started,
            self.first_s or 0.0,
            self.last_s,
        )


_MALFORMED = "a release request is (keys, sizes, positions): 1-d int64 arrays, sum(sizes) == len(positions)"


def _well_formed(request: Any) -> bool:
    return (
        isinstance(request, tuple)
        and len(request) == 3
        and all(isinstance(a, np.ndarray) and a.ndim == 1 and a.dtype == np.int64 for a in request)
        and request[0].shape == request[1].shape
        and int(request[1].sum()) == request[2].shape[0]
    )


@contextmanager
def serving(handler: Handler, gather_s: float | None = None) -> Iterator[ReleaseService]:
    """Run a :class:`ReleaseService` and name it in :data:`ENV` (for the processes started meanwhile)."""
    service = ReleaseService(handler, gather_s)
    before = os.environ.get(ENV)
    os.environ[ENV] = service.env_value
    try:
        yield service
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before
        client = _clients.pop(service.env_value, None)  # this process's own connection, if it released too
        if client is not None:
            client.close()
        service.close()
