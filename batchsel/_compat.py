"""Old import paths of modules that moved when the package was re-layered (0.2).

``import batchsel.optimizers`` and the like still work: a finder on ``sys.meta_path`` maps
the old name to the module's new home, warns once (``DeprecationWarning``, naming the new
path) and registers the same module object under the old name, so ``from
batchsel.optimizers import maximize`` returns the very same function. The module keeps its
own name and spec, so ``importlib.reload`` (IPython's autoreload) re-runs it. The names exported
by ``batchsel`` and ``batchsel.integrations`` did not move and do not warn.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Sequence

# old module path -> new module path; a moved package's submodules follow it
MOVED = {
    "batchsel.io": "batchsel.core.io",
    "batchsel.communicator": "batchsel.core.communicator",
    "batchsel.functions": "batchsel.submodular.functions",
    "batchsel.optimizers": "batchsel.submodular.optimizers",
    "batchsel.streaming": "batchsel.submodular.streaming",
    "batchsel.selectors.partition": "batchsel.submodular.partition",
    "batchsel.sharded": "batchsel.distributed.sharded",
    "batchsel.integrations.comm": "batchsel.distributed.comm",
    "batchsel.integrations.mpi": "batchsel.distributed.mpi",
    "batchsel.dedup": "batchsel.data.dedup",
    "batchsel.data_audit": "batchsel.data.audit",
    "batchsel.plan": "batchsel.plans.plan",
    "batchsel.report": "batchsel.plans.report",
    "batchsel.plotting": "batchsel.plans.plotting",
    "batchsel.filters": "batchsel.loop.filters",
    "batchsel.irreducible": "batchsel.loop.irreducible",
    "batchsel.losses": "batchsel.loop.losses",
    "batchsel.integrations.sampler": "batchsel.loop.sampler",
    "batchsel.integrations.feedback": "batchsel.loop.feedback",
    "batchsel.integrations.prefetch": "batchsel.loop.prefetch",
}


def new_name(old: str) -> str | None:
    """The new path of the module once called ``old`` (None: it did not move).

    >>> new_name("batchsel.functions.facility_location")
    'batchsel.submodular.functions.facility_location'
    >>> new_name("batchsel.selectors.base") is None
    True
    """
    for prefix, target in MOVED.items():
        if old == prefix or old.startswith(prefix + "."):
            return target + old[len(prefix) :]
    return None


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new
        self.spec: importlib.machinery.ModuleSpec | None = None  # the new module's own

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if new_name(spec.name.rpartition(".")[0]) is None:  # the moved package itself warned
            warnings.warn(
                f"{spec.name} moved to {self.new}: import it from there (the old path will be removed)",
                DeprecationWarning,
                stacklevel=2,  # warnings skips importlib's frames: 2 is the import statement
            )
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        sys.modules[spec.name] = module
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # the new module ran already; importlib has just set its __spec__ to the old path's
        # (whose loader runs nothing): give it back its own, or importlib.reload would
        # rename the module to the old path and re-run nothing
        module.__spec__ = self.spec


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the modules listed in :data:`MOVED` under their old names."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = new_name(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new))


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once): a moved package's old path must not
    reach the path finder, which would load a second copy of its submodules."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
