"""Each runner kind is one module of rig/runners and one registry line, and names itself nowhere else."""

import ast
import re
from pathlib import Path, PurePosixPath
from typing import get_args

import pytest

from rig.runners import registry
from rig.runners.base import Detection, Kind, Placeholder, Project
from rig.schema import RunnerKind

ROOT = Path(__file__).resolve().parent.parent
# Where kind names may be written: the kinds themselves and the schema's Literal of them.
ALLOWED = (ROOT / "rig" / "runners", ROOT / "rig" / "schema")
PACKAGES = (ROOT / "rig", ROOT / "harnesses")
NAMES = frozenset(registry.KINDS)
# Kind names that are ordinary words elsewhere ("command" is a tool argument, "pytest" a package):
# only a comparison with a kind, a lookup or a per-kind table counts for these.
UNAMBIGUOUS = frozenset(name for name in NAMES if "-" in name)


def _literals(node: ast.AST) -> set[str]:
    """The kind names a constant, or a tuple, list or set of constants, spells."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return {name for element in node.elts for name in _literals(element)}
    return set()


def _mentions_kind(node: ast.AST) -> bool:
    """Whether an expression reads something named kind (`kind`, `runner.kind`, `d.kind`)."""
    return any(
        (isinstance(sub, ast.Name) and "kind" in sub.id.lower())
        or (isinstance(sub, ast.Attribute) and "kind" in sub.attr.lower())
        for sub in ast.walk(node)
    )


def kind_names_in(source: str) -> list[str]:
    """Where `source` decides something by a runner kind's name, as `line: code`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        hit = False
        if isinstance(node, ast.Constant) and node.value in UNAMBIGUOUS:
            hit = True
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            hit = any(_literals(o) for o in operands) and any(_mentions_kind(o) for o in operands)
        elif isinstance(node, ast.Assign):
            hit = bool(_literals(node.value)) and any(_mentions_kind(target) for target in node.targets)
        elif isinstance(node, ast.Match):
            hit = _mentions_kind(node.subject) and any(
                _literals(sub) for case in node.cases for sub in ast.walk(case.pattern)
            )
        elif isinstance(node, ast.Subscript):
            hit = bool(_literals(node.slice)) and _mentions_kind(node.value)
        elif isinstance(node, ast.Call):
            hit = _mentions_kind(node.func) and any(_literals(arg) for arg in node.args)
        elif isinstance(node, ast.Dict):
            # A table with a row per kind: what should be an attribute of the kinds.
            hit = len({name for key in node.keys if key is not None for name in _literals(key)}) > 1
        if hit:
            found.append(f"{getattr(node, 'lineno', '?')}: {ast.unparse(node)[:80]}")
    return found


def _sources() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in package.rglob("*.py")
        # Installed node packages (a harness's CLI) are not the rig's code.
        if "node_modules" not in path.parts and not any(path.is_relative_to(allowed) for allowed in ALLOWED)
    )


def test_the_registry_holds_exactly_the_schemas_kinds() -> None:
    assert list(registry.KINDS) == list(get_args(RunnerKind))
    for name, kind in registry.KINDS.items():
        assert registry.kind_of(name) is kind


def test_the_registry_is_one_line_per_kind_and_each_kind_its_own_module() -> None:
    tree = ast.parse((ROOT / "rig" / "runners" / "registry.py").read_text())
    table = next(
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "KINDS"
    )
    assert isinstance(table, ast.Dict)
    assert len({key.lineno for key in table.keys if key is not None}) == len(registry.KINDS)
    modules = [kind.setup.__module__ for kind in registry.KINDS.values()]
    assert len(set(modules)) == len(modules)
    for module in modules:
        assert re.fullmatch(r"rig\.runners\.\w+", module), module


@pytest.mark.parametrize("name", list(registry.KINDS))
def test_each_kind_declares_everything(name: RunnerKind) -> None:
    kind = registry.kind_of(name)
    assert isinstance(kind, Kind)
    for field in ("protected_names", "source_suffixes", "test_files", "reporters", "hidden_companions"):
        value = getattr(kind, field)
        assert isinstance(value, tuple) and all(isinstance(v, str) for v in value), field
    assert isinstance(kind.python, bool) and isinstance(kind.takes_command, bool)
    assert isinstance(kind.language, str)
    assert kind.probe is None or isinstance(kind.probe, re.Pattern)
    for hook in (kind.setup, kind.runs_tests, kind.collects, kind.detect, kind.placeholder):
        assert callable(hook)
        assert hook.__module__ == kind.setup.__module__, "a kind's hooks live in its own module"
    # Today's kinds need no reporter package: their junit reporters are built in.
    assert kind.reporters == ()
    assert all(isinstance(p, str) and isinstance(c, str) for p, c in kind.tamper_files.items())
    assert len(kind.passing_test) == 2
    placeholder = kind.placeholder("the message")
    assert isinstance(placeholder, Placeholder) and "the message" in placeholder.content
    for pattern in kind.test_files:
        assert kind.is_test_file(pattern.replace("*", "example")), pattern
    assert isinstance(kind.collects(PurePosixPath("src", "example.txt")), bool)
    assert kind.runs_tests(["true"]) is False


def test_the_last_kind_recognises_any_project() -> None:
    *_, last = registry.KINDS.values()
    assert isinstance(last.detect(Project([], {}, lambda rel: None)), Detection)


def test_the_check_catches_a_kind_named_outside_the_runners() -> None:
    first, second = list(NAMES)[:2]
    for code in (
        f"if runner.kind == {first!r}: pass",
        f"ok = pack.spec.runner.kind in ({first!r},)",
        f"x = KINDS[{first!r}]",
        f"x = kind_of({first!r})",
        f"kind, evidence = {first!r}, 'found'",
        f"table = {{{first!r}: 1, {second!r}: 2}}",
        f"match kind:\n    case {first!r}:\n        pass",
        *(f"x = {name!r}" for name in UNAMBIGUOUS),
    ):
        assert kind_names_in(code), code
    # The same words where they are not kinds: a wrapper program, a tool call's argument.
    assert not kind_names_in('if name == "command": pass\nx = {"command": c}\ndist_version("pytest")')


def test_no_module_outside_the_runners_and_the_schema_names_a_kind() -> None:
    found = {
        str(path.relative_to(ROOT)): hits for path in _sources() if (hits := kind_names_in(path.read_text()))
    }
    assert found == {}
