"""The worker side of the release service (:mod:`hf_textdp.run.release_service`): a worker process started
by :func:`~hf_textdp.run.release_service.serving` finds the service's address and key in :data:`ENV` and
sends its releases there. The privatizer asks this module, so that nothing below ``run/`` imports it.
"""

from __future__ import annotations

from multiprocessing.connection import Client

import numpy as np

from .. import settings


__all__ = ["ENV", "RemoteRelease", "is_service_worker", "remote_release"]

#: the environment variable that tells a worker where the release service listens ("address:authkey hex")
ENV = settings.RELEASE_SERVICE


class RemoteRelease:
    """A worker's connection to the :class:`ReleaseService` named by :data:`ENV`."""

    def __init__(self, value: str) -> None:
        address, _, key = value.rpartition(":")
        self._conn = Client(address, family="AF_UNIX", authkey=bytes.fromhex(key))

    def release(self, keys: np.ndarray, sizes: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The service's release of ``positions`` (rows of ``sizes`` tokens keyed by ``keys``)."""
        self._conn.send((keys, sizes, positions))
        status, payload = self._conn.recv()
        if status == "error":
            raise payload
        return payload  # type: ignore[no-any-return]

    def close(self) -> None:
        self._conn.close()


_clients: dict[str, RemoteRelease] = {}


def is_service_worker() -> bool:
    """Whether this process was started to do the host work for a release service (:data:`ENV` is set)."""
    return settings.release_service() is not None


def remote_release() -> RemoteRelease | None:
    """This process's connection to the release service, when it runs as one of its workers (else ``None``)."""
    value = settings.release_service()
    if value is None:
        return None
    if value not in _clients:
        _clients[value] = RemoteRelease(value)
    return _clients[value]
