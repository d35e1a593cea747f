"""Fault injection: the failures a user can provoke, and what they see instead of a
segfault, a hang, ranks with different results or a destroyed input file.

Each case here failed on the code before its fix (reliability round 3); the README's
"Reliability" table lists them with the earlier rounds' guarantees. Multi-rank cases run
under mpiexec on 2 ranks and end in seconds (the launcher is killed on a timeout)."""
from __future__ import annotations

import hashlib
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import batchsel
from batchsel import cli

ROOT = Path(__file__).resolve().parents[1]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the command line never replaces its input ------------------------------------------

@pytest.fixture
def emb(tmp_path) -> Path:
    x = np.random.default_rng(0).standard_normal((60, 4)).astype(np.float32)
    np.save(tmp_path / "emb.npy", x)
    np.save(tmp_path / "labels.npy", np.arange(60) % 3)
    return tmp_path / "emb.npy"


def refused(argv: list[str], capsys) -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("alias", ["same", "symlink", "hardlink"])
@pytest.mark.parametrize("command", [
    ["select", "{emb}", "--k", "5", "--out", "{out}", "--force"],
    ["select", "{emb}", "--k", "5", "--stream", "--out", "{out}", "--force"],
    ["plan", "{emb}", "--batch-size", "8", "--workers", "2", "--out", "{out}", "--force"],
])
def test_an_output_that_is_the_input_is_refused(emb, alias, command, capsys):
    out = emb.with_name("out.npy" if command[0] == "select" else "out.npz")
    if alias == "same":
        out = emb
        if command[0] == "plan":  # a plan's name must end with .npz: an .npz input
            np.savez(emb.with_name("emb.npz"), x=np.load(emb))
            emb = out = emb.with_name("emb.npz")
    elif alias == "symlink":
        out.symlink_to(emb)
    else:
        os.link(emb, out)
    before = digest(emb)
    err = refused([a.format(emb=emb, out=out) for a in command] + ["--quiet"], capsys)
    assert "is the input EMB" in err
    assert digest(emb) == before


def test_plan_inputs_other_than_the_embeddings_are_protected_too(emb, capsys):
    labels = emb.with_name("labels.npz")
    np.savez(labels, y=np.arange(60) % 3)
    before = digest(labels)
    err = refused(["plan", str(emb), "--method", "coreset", "--labels", str(labels), "--batch-size", "8",
                   "--workers", "2", "--out", str(labels), "--force", "--quiet"], capsys)
    assert "is the input --labels" in err and digest(labels) == before


def test_a_plan_name_without_npz_is_refused(emb, capsys):
    out = emb.with_name("plan")
    err = refused(["plan", str(emb), "--batch-size", "8", "--workers", "2", "--out", str(out), "--quiet"], capsys)
    assert ".npz" in err and not out.exists() and not out.with_suffix(".npz").exists()
