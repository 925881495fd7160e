"""``python -m scheduling.sim --out DIR [...]``: see scheduling/sim/cli.py and docs/simulator.md."""

import sys

from scheduling.sim.cli import main

sys.exit(main())
