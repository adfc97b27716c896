"""Reading hidden-test outcomes from junit XML, and the canaries that prove them.

Every runner kind writes junit XML; a test's id is `<module>::<test>`: pytest's classname's last
part, or (node --test) the top-level describe() a hidden file wraps its tests in, or (vitest) the
file's stem. A canary is a
test the rig writes and that must fail with its own message: a canary that passed, vanished or
failed otherwise means outcomes were forced from inside the runner or the report was rewritten.
"""

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

TESTS_FAILED = 1


@dataclass(frozen=True)
class Case:
    """One junit testcase: its module, its name, passed/failed/skipped and its failure text."""

    module: str
    name: str
    state: str
    message: str

    @property
    def id(self) -> str:
        """`module::name`; a module's own report (a collection error, a file that did not load) is
        just its name."""
        return f"{self.module}::{self.name}" if self.module else self.name


def _case(element: ET.Element, module: str) -> Case:
    tags = {child.tag for child in element}
    state = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
    problems = [child for child in element if child.tag in ("failure", "error")]
    message = " ".join(f"{child.get('message', '')} {child.text or ''}" for child in problems)
    return Case(module, element.get("name", ""), state, message)


def pytest_cases(junit: Path) -> list[Case]:
    """Every testcase of pytest's junit XML; the module is the classname's last dotted part."""
    return [
        _case(case, case.get("classname", "").rsplit(".", 1)[-1])
        for case in ET.parse(junit).getroot().iter("testcase")
    ]


def suite_cases(junit: Path) -> list[Case]:
    """Every testcase of node's junit XML: a top-level testcase is its own module; a testcase in a
    top-level testsuite (however deeply nested) belongs to that suite."""
    cases = []
    for top in ET.parse(junit).getroot():
        if top.tag == "testcase":
            cases.append(_case(top, ""))
        elif top.tag == "testsuite":
            cases += [_case(case, top.get("name", "")) for case in top.iter("testcase")]
    return cases


def leaf(module: str) -> str:
    """A module's own name, which a first describe of its file repeats: its last path part (a
    hidden file run at its own path is `test/en/month`)."""
    return module.rsplit("/", 1)[-1]


def named_cases(junit: Path, modules: Mapping[str, str]) -> list[Case]:
    """Every testcase of a report whose classname is the file that ran it (vitest's): the module
    is `modules`' name for that file, the name its full test name (`describe > test`) with a
    first describe named after the module left out."""
    cases = []
    for element in ET.parse(junit).getroot().iter("testcase"):
        classname = element.get("classname", "")
        module = modules.get(classname, classname)
        case = _case(element, module)
        first, separator, rest = case.name.partition(" > ")
        cases.append(replace(case, name=rest) if separator and first == leaf(module) else case)
    return cases


@dataclass(frozen=True)
class Canary:
    """One of the rig's failing tests; every name is random so code cannot target it by name."""

    module: str
    test: str
    message: str

    def owns(self, case: Case) -> bool:
        """Whether a junit testcase is this canary (its test, or its module's collection report)."""
        return (bool(self.module) and self.module in (case.module, case.name)) or case.name == self.test

    def problem(self, cases: list[Case]) -> str | None:
        """What is wrong with this canary's outcome, or None if it failed as it must."""
        mine = [case for case in cases if self.owns(case)]
        if not mine:
            return "is missing from the junit report"
        if len(mine) > 1:
            return f"appears {len(mine)} times in the junit report"
        if mine[0].state != "failed":
            return f"{mine[0].state} instead of failing"
        if self.message not in mine[0].message:
            return "failed without its own failure message"
        return None


@dataclass(frozen=True)
class Canaries:
    """The canaries of one hidden run."""

    members: tuple[Canary, ...]

    def owns(self, case: Case) -> bool:
        """Whether a junit testcase belongs to one of the canaries."""
        return any(c.owns(case) for c in self.members)

    def problem(
        self, cases: list[Case], returncode: int | None, runner: str, failed_exit: int = TESTS_FAILED
    ) -> str | None:
        """What is wrong with the canaries' outcomes, to follow "the rig's canary test"; None if none.

        " <name> passed instead of failing" for one canary, "s failed but pytest exited 0, not 1".
        `failed_exit`: the exit code the runner gives for this report's failures.
        """
        for canary in self.members:
            problem = canary.problem(cases)
            if problem:
                return f" {canary.module or canary.test} {problem}"
        if returncode != failed_exit:
            return f"s failed but {runner} exited {returncode}, not {failed_exit}"
        return None
