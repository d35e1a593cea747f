"""The test helpers' folders on sys.path once, for every test file (run alone or together):
tests/ (shared test modules) and tests/mp_scripts/ (the multi-process jobs and their helpers)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "mp_scripts")]
