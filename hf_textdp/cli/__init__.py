"""``hf-textdp``: the command-line front end. It holds no logic: it parses arguments,
calls the public API, and prints one line per :class:`HfTextDPError` (exit 2), no traceback
unless ``--debug``.

One module per command (``privatize.py``, ``report.py``, ...), the arguments they share (``arguments.py``) and
the parsing of config, options and seed (``parse.py``); ``app.py`` builds the parser and runs ``main``.
"""

from __future__ import annotations

from .app import build_parser, main


__all__ = ["build_parser", "main"]
