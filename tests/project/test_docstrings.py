"""The examples in the library's docstrings run and print what they show."""

import doctest
import importlib
import pkgutil

import pytest

import batchsel
import batchsel.integrations


def modules() -> list[str]:
    names = []
    for package in (batchsel, batchsel.integrations):
        names.append(package.__name__)
        names += [
            m.name
            for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
            if m.name != "batchsel.__main__"
        ]
    return sorted(set(names))


@pytest.mark.parametrize("name", modules())
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples failed in {name}"


def test_module_docstrings_say_what_the_module_holds_in_a_few_lines():
    # histories and measurements belong in docs/ (design notes), not at the top of a module
    long = {}
    for name in modules():
        doc = importlib.import_module(name).__doc__ or ""
        if len(doc.strip().splitlines()) > 25:
            long[name] = len(doc.strip().splitlines())
    assert not long, f"module docstrings over 25 lines: {long}"
