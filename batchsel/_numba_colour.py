"""No colour reset from numba at exit: imported first by ``batchsel``.

numba formats its error messages with colorama, whose ``init()`` writes ESC[0m at exit
wherever stdout is a terminal, mpiexec's pseudo-terminals included, so the code landed in
the job's piped output after every run of a library script. numba reads this switch once,
when it is imported; a user's own setting stands (``batchsel.cli.terminal`` also drops the
handler where numba was imported first).
"""

import os
import sys

if "numba" not in sys.modules:
    os.environ.setdefault("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING", "1")
