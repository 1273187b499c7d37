"""The library's root logger, its level set by :func:`hf_textdp.settings.verbosity` (as ``datasets.utils.logging``)."""

from __future__ import annotations

import logging

from .. import settings


_ROOT = "hf_textdp"
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
_configured = False
_warned_once: set[str] = set()


def _configure() -> None:
    global _configured
    if _configured:
        return
    _configured = True
    root = logging.getLogger(_ROOT)
    env = settings.verbosity()
    root.setLevel(_LEVELS.get(env, logging.WARNING))
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        root.addHandler(handler)
    root.propagate = False


def get_logger(name: str) -> logging.Logger:
    """Return a logger under the library root (``hf_textdp.*``)."""
    _configure()
    if not name.startswith(_ROOT):
        name = f"{_ROOT}.{name}"
    return logging.getLogger(name)


def set_verbosity(level: int) -> None:
    _configure()
    logging.getLogger(_ROOT).setLevel(level)


def set_verbosity_info() -> None:
    set_verbosity(logging.INFO)


def set_verbosity_warning() -> None:
    set_verbosity(logging.WARNING)


def set_verbosity_debug() -> None:
    set_verbosity(logging.DEBUG)


def set_verbosity_error() -> None:
    set_verbosity(logging.ERROR)


def warn_once(logger: logging.Logger, key: str, message: str) -> None:
    """Log ``message`` at WARNING only the first time ``key`` is seen in this process."""
    if key in _warned_once:
        return
    _warned_once.add(key)
    logger.warning(message)
