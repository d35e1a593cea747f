"""The package's shape as a contract (docs/design/architecture.md).

The floors and the absence of import cycles are `lint-imports`' contracts (pyproject.toml,
run by `make lint`); this file checks what import-linter cannot: private names taken from
another module, the size limits, and the old import paths of moved modules.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "batchsel"
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 10
# numba kernel modules hold long loops on purpose (one pass, no temporaries)
KERNEL_MODULES = {"kernels.py", "_smdl_kernels.py"}
# the drop-in's constructors repeat apricot-select's own signatures, parameter for parameter
SIGNATURES_FROM_ELSEWHERE = {"apricot"}


def _modules() -> list[pathlib.Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _dotted(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_kernel(node: ast.AST) -> bool:
    for d in getattr(node, "decorator_list", []):
        target = d.func if isinstance(d, ast.Call) else d
        if getattr(target, "id", getattr(target, "attr", "")) in ("njit", "jit") or "kernel" in ast.unparse(d):
            return True
    return False


def _in_keyword_groups(function: ast.FunctionDef, cls: ast.ClassDef | None) -> bool:
    """A long signature kept for compatibility: at most three positional parameters, and a
    docstring (the class's, for a constructor) with a "Keyword groups:" paragraph that names
    every keyword-only parameter."""
    args = function.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args) if a.arg not in ("self", "cls")]
    doc = ast.get_docstring(cls if cls is not None and function.name == "__init__" else function) or ""
    groups = doc.partition("Keyword groups:")[2].split("\n\n")[0]
    return len(positional) <= 3 and bool(groups) and all(f"`{a.arg}`" in groups for a in args.kwonlyargs)


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
    assert offenders == [], "\\n".join(offenders)


def test_size_limits():
    """Modules, classes and functions small enough to read; few enough parameters to call."""
    offenders = []
    for path in _modules():
        source = path.read_text()
        where = path.relative_to(PACKAGE.parent)
        kernel_module = path.name in KERNEL_MODULES
        if source.count("\n") > MAX_MODULE_LINES and not kernel_module:
            offenders.append(f"module {where}: {source.count(chr(10))} lines")
        tree = ast.parse(source)
        owner = {f: c for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for f in c.body}
        for node in ast.walk(tree):
            length = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
            if isinstance(node, ast.ClassDef) and length > MAX_CLASS_LINES:
                offenders.append(f"class {where}:{node.name}: {length} lines")
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if length > MAX_FUNCTION_LINES and not (kernel_module or _is_kernel(node)):
                offenders.append(f"function {where}:{node.name}: {length} lines")
            args = node.args
            params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.arg not in ("self", "cls")]
            public = not node.name.startswith("_") or node.name == "__init__"
            exempt = kernel_module or where.parts[1].removesuffix(".py") in SIGNATURES_FROM_ELSEWHERE
            if public and len(params) > MAX_PARAMETERS and not exempt and not _in_keyword_groups(node, owner.get(node)):
                offenders.append(f"parameters {where}:{node.name}: {len(params)}")
    assert offenders == [], "\\n".join(offenders)


@pytest.mark.parametrize(
    "old, new, name",
    [
        ("batchsel.optimizers", "batchsel.submodular.optimizers", "maximize"),
        ("batchsel.functions.facility_location", "batchsel.submodular.functions.facility_location", "FacilityLocation"),
        ("batchsel.integrations.sampler", "batchsel.loop.sampler", "SelectionBatchSampler"),
        ("batchsel.io", "batchsel.core.io", "atomic_write"),
    ],
)
def test_old_import_paths_still_work_and_warn(old, new, name):
    """A moved module imports under its old path as the same object, with a
    DeprecationWarning that names the new path (in a fresh interpreter: a clean sys.modules)."""
    code = (
        "import warnings, importlib\n"
        "warnings.simplefilter('error', DeprecationWarning)\n"
        f"new = importlib.import_module({new!r})\n"
        "try:\n"
        f"    importlib.import_module({old!r})\n"
        "except DeprecationWarning as w:\n"
        "    print(w)\n"
        "warnings.simplefilter('ignore', DeprecationWarning)\n"
        f"old = importlib.import_module({old!r})\n"
        f"assert old is new and getattr(old, {name!r}) is getattr(new, {name!r})\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    moved_to = out.stdout.split(" moved to ")[1].split(":")[0]  # the package that moved, or the module
    assert new.startswith(moved_to)
