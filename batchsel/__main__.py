"""``python -m batchsel``: the same as the ``batchsel`` command."""

import sys

from .cli import main

sys.exit(main())
