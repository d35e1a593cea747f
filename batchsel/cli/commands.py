"""What the subcommand modules share.

Each subcommand module (``audit``, ``dedup``, ``inspect``, ``plan``, ``select``) has

- ``add_parser(sub, parents)``, called by :func:`batchsel.cli.parser.build_parser`: it
  adds the subcommand (:func:`add_command`: its description and examples printed as
  written) and its options, among them the arguments several commands take
  (:func:`add_embeddings_argument`, :func:`add_threshold_argument`);
- ``cmd_NAME(args)``, which runs the subcommand on the parsed command line (the options
  of its ``add_parser``) and returns the exit code, 0; errors are raised
  (:class:`~batchsel.cli.errors.UsageError`: exit 2).
"""

from __future__ import annotations

import argparse
from typing import Any


def add_command(
    sub: Any, parents: list[argparse.ArgumentParser], name: str, *, help: str, description: str, epilog: str
) -> argparse.ArgumentParser:
    """Add the subcommand ``name``, its description and examples printed as written.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        The ``batchsel`` parser's subcommands.
    parents : list of argparse.ArgumentParser
        The options every command takes (``--quiet``, ``--debug``, ``--force``).
    name : str
        The subcommand.
    help, description, epilog : str
        Its line in ``batchsel --help``; the text before its options and after them (the examples).

    Returns
    -------
    argparse.ArgumentParser
        The subcommand's parser, for its options.
    """
    return sub.add_parser(
        name,
        parents=parents,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=epilog,
        help=help,
        description=description,
    )


def add_embeddings_argument(parser: argparse.ArgumentParser) -> None:
    """Add the positional argument ``EMB`` (``args.embeddings``): the embeddings file."""
    parser.add_argument("embeddings", metavar="EMB", help="N x d embeddings: .npy, .npz[:NAME] or .pt[:NAME]")


def add_threshold_argument(parser: argparse.ArgumentParser, help: str) -> None:
    """Add ``--threshold T``, a cosine similarity of near-duplicates (default 0.95; checked
    by :func:`batchsel.cli.inputs.check_threshold`), with its ``help``."""
    parser.add_argument("--threshold", type=float, default=0.95, metavar="T", help=help)
