"""``python -m norga`` = the ``norga`` command (train, eval, summarize, list)."""
import sys

from .cli import main

sys.exit(main())
