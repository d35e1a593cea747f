"""Where things are, for every test module whatever floor folder it lives in (tests/<floor>/):
the repository's root, the tests' root and their shared folders. tests/conftest.py puts tests/ on
sys.path, so a test module reads them with ``from paths import REPO, MP_SCRIPTS``."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PACKAGE = REPO / "batchsel"
GOLDEN = TESTS / "golden"
MP_SCRIPTS = TESTS / "mp_scripts"
#: the folders under tests/ that hold no test module: shared data, the multi-process jobs
SHARED_FOLDERS = frozenset({"golden", "mp_scripts", "__pycache__"})
