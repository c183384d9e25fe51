"""``python -m rnic.sim``: the simulation command line."""

import sys

from rnic.sim.cli import main

sys.exit(main())
