"""The package's shape as a contract (docs/design/architecture.md).

The floors and the absence of import cycles are `lint-imports`' contracts (pyproject.toml,
run by `make lint`); this file checks what import-linter cannot: private names taken from
another module, and the old import paths of moved modules (deprecation stubs that the
package itself never imports), and the test tree's shape: one folder per floor. Sizes are a
guide for reviewers, not a test.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest
from paths import PACKAGE, REPO, SHARED_FOLDERS, TESTS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# old module path -> new module path: each old path is a stub module that warns and re-exports
MOVED = {
    "batchsel.io": "batchsel.core.io",
    "batchsel.communicator": "batchsel.core.communicator",
    "batchsel.functions": "batchsel.submodular.functions",
    "batchsel.functions.facility_location": "batchsel.submodular.functions.facility_location",
    "batchsel.optimizers": "batchsel.submodular.optimizers",
    "batchsel.streaming": "batchsel.submodular.streaming",
    "batchsel.selectors.partition": "batchsel.submodular.partition",
    "batchsel.selectors.base": "batchsel.selectors",  # and .sharding, .selector, .hashing, .online
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


def _modules() -> list[pathlib.Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _dotted(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a module, lazy ones included, relative ones resolved;
    ``from m import x`` gives both ``m`` and ``m.x`` (x may be a submodule)."""
    package = _dotted(path) if path.name == "__init__.py" else _dotted(path).rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            found += [(node.lineno, module)] + [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def test_no_module_takes_another_modules_private_name():
    """``from m import _name`` only for a private submodule of the importer's own package."""
    offenders = []
    for path in _modules():
        package = _dotted(path) if path.name == "__init__.py" else _dotted(path).rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("batchsel"):
                continue
            for alias in node.names:
                name = alias.name
                if not name.startswith("_") or name.startswith("__") and name.endswith("__"):
                    continue
                own_submodule = (
                    node.module == package and PACKAGE.parent.joinpath(*package.split("."), f"{name}.py").exists()
                )
                if not own_submodule:
                    offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.module}.{name}")
    assert offenders == [], "\n".join(offenders)


def _stubs() -> set[str]:
    """The modules whose docstring says they are a deprecated path."""
    return {
        _dotted(path)
        for path in _modules()
        if (ast.get_docstring(ast.parse(path.read_text())) or "").startswith("Deprecated:")
    }


def test_every_old_path_is_a_stub_and_the_package_imports_none():
    """The stubs are the old paths (no more, no fewer), and no module of the package imports
    one, not even lazily: a stub runs only when a user's code asks for its old path."""
    assert _stubs() == set(MOVED)
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line} {module}"
        for path in _modules()
        if _dotted(path) not in MOVED
        for line, module in _imported(path)
        if module in MOVED
    ]
    assert offenders == [], "\n".join(offenders)


STUBS = """
import importlib, sys, warnings
import batchsel, batchsel.integrations
moved = {moved!r}
assert not [m for m in moved if m in sys.modules], "the package imported a stub"
warnings.simplefilter("always")
for old, new in moved.items():
    with warnings.catch_warnings(record=True) as caught:
        stub = importlib.import_module(old)
    said = [str(w.message) for w in caught if w.category is DeprecationWarning]
    assert said and all(f"{{old}} moved to {{new}}" in m for m in said), (old, said)
    homes = [importlib.import_module(new)]
    names = getattr(homes[0], "__all__", None) or [n for n in vars(homes[0]) if not n.startswith("_")]
    if old == "batchsel.selectors.base":  # 0.1.0's names, now in several modules
        homes += [importlib.import_module(f"batchsel.selectors.{{m}}") for m in ("sharding", "selector", "hashing", "online")]
        names = stub.__all__
    for name in set(names) | set(getattr(stub, "__all__", ())):
        home = next(h for h in homes if hasattr(h, name))
        assert getattr(stub, name) is getattr(home, name), (old, name)
    if old.count(".") == 1:  # batchsel.<old>: an attribute of the package too
        assert getattr(batchsel, old.split(".")[1]) is stub
print("stubs ok")
"""


def test_every_stub_warns_and_re_exports_the_new_modules_names():
    """Each stub, once: its DeprecationWarning names the new path, and each public name of the
    new module (its ``__all__``, or every name without an underscore) is the very same object."""
    out = subprocess.run([sys.executable, "-c", STUBS.format(moved=MOVED)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "stubs ok" in out.stdout, out.stderr[-3000:]


@pytest.mark.parametrize(
    "old, new, name",
    [
        ("batchsel.optimizers", "batchsel.submodular.optimizers", "maximize"),
        ("batchsel.functions.facility_location", "batchsel.submodular.functions.facility_location", "FacilityLocation"),
        ("batchsel.integrations.sampler", "batchsel.loop.sampler", "SelectionBatchSampler"),
        ("batchsel.io", "batchsel.core.io", "atomic_write"),
        ("batchsel.selectors.base", "batchsel.selectors", "Selector"),
    ],
)
def test_old_import_paths_still_work_and_warn(old, new, name):
    """A moved module imports under its old path, with a DeprecationWarning that names the
    new path, and ``from old import name`` gives the new module's very object (in a fresh
    interpreter: a clean sys.modules). The old path is a module of its own (a stub), not an
    alias of the new one."""
    code = (
        "import warnings, importlib\n"
        "warnings.simplefilter('error', DeprecationWarning)\n"
        f"new = importlib.import_module({new!r})\n"
        "try:\n"
        f"    importlib.import_module({old!r})\n"
        "except DeprecationWarning as w:\n"
        "    print(w)\n"
        "warnings.simplefilter('ignore', DeprecationWarning)\n"
        f"from {old} import {name} as taken\n"
        f"old = importlib.import_module({old!r})\n"
        f"assert taken is getattr(new, {name!r}) and old.__name__ == {old!r} and new.__name__ == {new!r}\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    moved_to = out.stdout.split(" moved to ")[1].split(":")[0].split(" ")[0]  # the package that moved, or the module
    assert new.startswith(moved_to)


@pytest.mark.parametrize("old", ["batchsel.loop.filters", "batchsel.filters"])
def test_a_filter_pickled_under_an_earlier_module_path_loads(old):
    """CandidateFilter and IrreducibleLoss moved out of their package's ``__init__`` (their
    ``__module__`` changed): a pickle that names the package, or the 0.1.0 path, still loads."""
    import pickle
    import warnings

    import batchsel

    for obj in (batchsel.CandidateFilter(4, 2), batchsel.IrreducibleLoss()):
        data = pickle.dumps(obj, protocol=2)  # GLOBAL opcodes: module and name as plain text
        module = type(obj).__module__
        package = module.rpartition(".")[0]
        assert package in ("batchsel.loop.filters", "batchsel.loop.irreducible") and module.encode() in data
        then = old if package.endswith("filters") else old.replace("filters", "irreducible")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the 0.1.0 path's stub
            loaded = pickle.loads(data.replace(module.encode(), then.encode()))
        assert type(loaded) is type(obj) and repr(loaded) == repr(obj)


def _floors() -> set[str]:
    """The package's floors: the layers of import-linter's "floors" contract (pyproject.toml)."""
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["id"] == "floors")["layers"]
    return {name.strip() for layer in layers for name in layer.split("|")}


def test_every_test_module_lives_in_the_folder_of_a_floor():
    """tests/<floor>/test_*.py, a folder per floor of the package, or tests/project/ for the
    whole project's checks (docs, packaging, examples, golden outputs, benchmarks); tests/ itself
    keeps the shared conftest.py and paths.py, the golden data and the multi-process jobs.
    Basenames are unique: pytest imports a test module by its basename (no __init__.py)."""
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == [], "move it into tests/<floor>/"
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name[0] not in "._"} - SHARED_FOLDERS
    assert folders - _floors() - {"project"} == set(), f"not a floor of batchsel: {sorted(_floors())}"
    modules = [p for p in TESTS.rglob("test_*.py") if not SHARED_FOLDERS & set(p.relative_to(TESTS).parts)]
    assert [str(p.relative_to(TESTS)) for p in modules if p.parent.parent != TESTS] == []  # no deeper folders
    names = [p.name for p in modules]
    assert sorted({name for name in names if names.count(name) > 1}) == []
