"""Several ``batchsel`` command lines under one mpiexec launch, for tests/project/test_faults.py:

    mpiexec -n 1 python cli_ranks_job.py CASES.json 0 : -n 1 python cli_ranks_job.py CASES.json 1

CASES.json lists ``[folder, argv of rank 0, argv of rank 1]``; each rank runs its own
command line (``batchsel.cli.main``, as ``python -m batchsel`` does) in the folder, one
case after the other, its stdout and stderr (file descriptors 1 and 2: logging's handler
included) caught in files (no terminal, as a launcher's pipes), then prints
``case I rank R exit CODE`` and the caught lines prefixed ``case I rank R out| `` and
``case I rank R err| ``, ``\r`` written as ``\\r`` and ESC as ``\\x1b`` (the lines stay lines).
One launch instead of one per case: each costs seconds.
"""

import json
import os
import sys
import tempfile

from batchsel.cli import main


def run(folder: str, argv: list[str]) -> tuple[int, str, str]:
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile("w+b") as out, tempfile.TemporaryFile("w+b") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        cwd = os.getcwd()
        try:
            os.chdir(folder)
            code = main(argv)
        finally:
            os.chdir(cwd)
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        out.seek(0)
        err.seek(0)
        return code, out.read().decode(errors="replace"), err.read().decode(errors="replace")


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    rank = int(sys.argv[2])
    for i, (folder, *argvs) in enumerate(cases):
        code, out, err = run(folder, argvs[rank])
        print(f"case {i} rank {rank} exit {code}", flush=True)
        for stream, text in (("out", out), ("err", err)):
            for line in text.replace("\r", "\\r").replace("\x1b", "\\x1b").split("\n"):
                print(f"case {i} rank {rank} {stream}| {line}", flush=True)
