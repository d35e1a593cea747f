"""``python -m batchsel``: the same as the ``batchsel`` command."""

import sys

from batchsel.cli import main

sys.exit(main())
