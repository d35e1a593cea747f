"""Griffe extension: the docstrings' Sphinx roles become cross-references on the docs site.

The docstrings keep Sphinx's roles (``:func:`maximize```, ``:class:`~batchsel.EmbeddingIndex```,
``:meth:`Plan.report <batchsel.EpochPlan.report>```), which read well in ``help()`` and in
Sphinx/numpydoc. mkdocstrings renders Markdown, where they would stay literal text. At build time,
this extension (loaded by mkdocstrings-python: ``extensions`` in mkdocs.yml) rewrites each role of
the loaded docstrings into an optional autorefs cross-reference: a link where the object it names is
rendered on the site, code where it is not (a private helper, a method not on the API page). The
name is resolved as Sphinx does: in the scope of the documented object (its class, module, their
imports, inherited members), else as a full path (``batchsel.integrations.X`` is documented as
``integrations.X``). A role whose name resolves nowhere renders as code. The sources are not
modified. ``docs/hooks.py`` fails the build if a role is still literal in a rendered page.

It also reads a section headed ``Example`` as numpydoc's ``Examples`` and fences a doctest outside
that section, so that doctests render as code, not as Markdown's block quotes (``>>>``).
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

# :func:`name`, :py:meth:`~pkg.Class.name`, :class:`title <pkg.Class>`, :attr:`!name` (no link)
ROLE = re.compile(
    r":(?:py:)?(?P<role>func|class|meth|attr|mod|data|exc|obj|const|type):"
    r"`(?P<text>[^`]+)`"
)
# numpydoc's section is "Examples": griffe renders one headed "Example" as an admonition of Markdown,
# where the doctest's ">>>" lines become nested block quotes
EXAMPLE = re.compile(r"^(?P<indent>[ \t]*)Example\n(?P=indent)-{7}$", re.MULTILINE)
UNDERLINE = re.compile(r"[ \t]*-{3,}[ \t]*")
EXPLICIT = re.compile(r"(?P<title>.*?)\s*<(?P<target>[^<>]+)>", re.DOTALL)
# what the source tree calls batchsel.integrations is loaded as the top-level package integrations
RENAMED = {"batchsel.integrations": "integrations"}


def _rename(path: str) -> str:
    for old, new in RENAMED.items():
        if path == old or path.startswith(old + "."):
            return new + path[len(old) :]
    return path


def _member(obj: griffe.Object | griffe.Alias, name: str) -> griffe.Object | griffe.Alias | None:
    try:
        members = obj.all_members if obj.is_class else obj.members
        return members.get(name)
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def resolve(scope: griffe.Object, name: str, collection: griffe.ModulesCollection) -> str | None:
    """The path of the object ``name`` means in ``scope``'s docstring, None if it names none."""
    head, *rest = _rename(name).split(".")
    found: griffe.Object | griffe.Alias | None = None
    obj: griffe.Object | None = scope
    while obj is not None and found is None:  # the scope, then its parents (class, module, package)
        found = _member(obj, head)
        obj = obj.parent
    if found is None:
        found = collection.members.get(head)  # a full path: a loaded package
    for part in rest:
        found = _member(found, part) if found is not None else None
    if found is None:
        return None
    try:
        return found.canonical_path
    except griffe.AliasResolutionError:  # an alias to something not loaded (numpy, torch)
        return found.path


def render(match: re.Match[str], scope: griffe.Object, collection: griffe.ModulesCollection) -> str:
    text = " ".join(match["text"].split())
    explicit = EXPLICIT.fullmatch(text)
    title, target = (explicit["title"], explicit["target"]) if explicit else (None, text)
    link = not target.startswith("!")
    target = target.lstrip("!")
    if title is None:
        title = target.lstrip("~.")
        if target.startswith("~"):
            title = title.rsplit(".", 1)[-1]
    path = resolve(scope, target.lstrip("~.").removesuffix("()"), collection) if link else None
    code = f"<code>{html.escape(title)}</code>"
    if path is None:
        if link and "." in target and target.lstrip("~.").split(".", 1)[0] in {"batchsel", "integrations"}:
            path = _rename(target.lstrip("~.").removesuffix("()"))  # a package loaded later
        else:
            return code
    # optional: autorefs renders code, without a warning, where the object is not on the site
    return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def fence_doctests(text: str) -> str:
    """Doctests outside an Examples section (griffe's own code) fenced as code, not block quotes."""
    lines = text.split("\n")
    out: list[str] = []
    section, fenced, i = "", False, 0
    while i < len(lines):
        line = lines[i]
        if line.strip() and i + 1 < len(lines) and UNDERLINE.fullmatch(lines[i + 1]):
            section = line.strip().lower()
        if line.lstrip().startswith("```"):
            fenced = not fenced
        previous = next((p for p in reversed(out) if p.strip()), "")
        # an indented block after a paragraph is Markdown's code already (reST's "Example::")
        if line.lstrip().startswith(">>>") and not fenced and section != "examples":
            if _indent(line) <= _indent(previous) or not previous:
                end = i
                while end < len(lines) and lines[end].strip():
                    end += 1
                pad = " " * _indent(line)
                if out and out[-1].strip():
                    out.append("")
                out += [f"{pad}```pycon", *lines[i:end], f"{pad}```"]
                i = end
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


class SphinxRoles(griffe.Extension):
    """Rewrites the Sphinx roles of every docstring of a loaded package (see the module's docstring)."""

    def __init__(self) -> None:
        self.converted = 0

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        for obj in _objects(pkg):
            docstring = obj.docstring
            if docstring is None:
                continue
            value, count = ROLE.subn(lambda m: render(m, obj, loader.modules_collection), docstring.value)
            value = EXAMPLE.sub(r"\g<indent>Examples\n\g<indent>--------", value)
            if ">>>" in value:
                value = fence_doctests(value)
            if value != docstring.value:
                docstring.value = value
                docstring.__dict__.pop("parsed", None)  # parsed lazily; drop a parse of the old text
            self.converted += count


def _objects(obj: griffe.Object):
    yield obj
    for member in obj.members.values():
        if not member.is_alias and isinstance(member, griffe.Object):
            yield from _objects(member)
