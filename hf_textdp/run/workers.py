"""How ``datasets`` runs its ``num_proc`` worker processes when the privatizer runs on a GPU."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from .. import settings
from .release_service import serving


__all__ = ["SERVICE_SWITCH", "spawned_workers", "uses_gpu_workers", "worker_threads"]

#: the variable that makes every GPU worker hold its own CUDA context and run its own releases
SERVICE_SWITCH = settings.RELEASE_SERVICE_OFF
#: the thread pools a worker would size to every core: OpenMP (torch), MKL, Rayon (the fast tokenizers)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS", "RAYON_RS_NUM_CPUS")


@contextmanager
def worker_threads(num_proc: int) -> Iterator[None]:
    """Workers started meanwhile share the cores: each sizes its thread pools to ``cores // num_proc`` (≥ 1).

    Otherwise every worker runs a pool as wide as the machine: ``num_proc``² threads, whose spinning
    starves the process that serves the GPU. Variables the user has set are left as they are.
    """
    width = str(max(1, (os.cpu_count() or 1) // num_proc))
    unset = [name for name in THREAD_VARIABLES if name not in os.environ]
    for name in unset:
        os.environ[name] = width
    try:
        yield
    finally:
        for name in unset:
            os.environ.pop(name, None)


def uses_gpu_workers(device: str, num_proc: int | None) -> bool:
    """Whether ``Dataset.map`` with ``num_proc`` workers on ``device`` needs spawned workers (several, on CUDA)."""
    return bool(num_proc and num_proc >= 2 and device.startswith("cuda"))


@contextmanager
def spawned_workers(
    device: str, num_proc: int | None, release: Callable[[Any, Any, Any], Any] | None = None
) -> Iterator[None]:
    """On a CUDA ``device`` with several workers, ``Dataset.map``'s pool spawns them instead of forking, and
    (given ``release``) this process serves their releases on the GPU.

    CUDA does not survive a fork: a worker forked from a parent that has used the GPU (the pipeline loads
    the model before it writes anything, so that a bad model fails first) cannot use it. Spawned workers
    start fresh and rebuild the privatizer from its pickled configuration, as forked ones do. With
    ``release`` (a :meth:`ReleaseEngine.release_keyed`), the workers do the host work on CPU and this process
    alone holds the GPU (:mod:`~hf_textdp.run.release_service`), several workers' batches in one call,
    instead of each worker time-sharing the GPU with a CUDA context of its own. The spawned workers size
    their thread pools to the cores they share (:func:`worker_threads`; forked ones already run one torch
    thread each). The start method of ``multiprocess`` (the pool ``datasets`` uses) is restored afterwards.
    CPU runs keep the platform's default.
    """
    if not uses_gpu_workers(device, num_proc):
        yield
        return
    import multiprocess

    prev = multiprocess.get_start_method(allow_none=True)
    multiprocess.set_start_method("spawn", force=True)
    try:
        with ExitStack() as stack:
            assert num_proc is not None
            stack.enter_context(worker_threads(num_proc))
            if release is not None and not settings.release_service_off():
                stack.enter_context(serving(release))
            yield
    finally:
        multiprocess.set_start_method(prev, force=True)
