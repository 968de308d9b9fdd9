"""``python -m norga`` = the ``norga`` command (train, eval, summarize, list)."""
import sys

from .commands.cli import main

sys.exit(main())
