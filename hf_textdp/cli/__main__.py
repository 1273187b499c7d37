"""``python -m hf_textdp.cli``: the ``hf-textdp`` command."""

import sys

from .app import main


sys.exit(main())
