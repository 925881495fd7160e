"""``python -m gpuportal`` runs the CLI (the same as the ``gpuportal`` command)."""

import sys

from gpuportal.cli import main

sys.exit(main())
