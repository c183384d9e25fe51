"""``python -m rnic.sim``: the simulation command line."""

import sys

from .cli import main

sys.exit(main())
