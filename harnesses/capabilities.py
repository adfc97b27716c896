"""What each harness can be measured on: one table, derived from the adapters' declarations.

An experiment "Claude Code vs Codex vs Gemini CLI" is fair only where rig measures each harness the
same way, so what a harness cannot do must be said, never found later as a silent gap. Every
capability is read from what its adapter class declares (harnesses.protocol.HarnessBase): the
condition factors it realises (`factors`), whether a run budget can hold it (`live_usage` or
`session_usage`, `live_cost`), the token figures and compaction metrics its parser reads (`usage_fields`,
`compaction_fields`), whether the mock drives it and whether its own provider retries are off
(`calibrated`, `provider_retries_s`), whether it runs other versions of its CLI
(`installs_versions`). A capability it lacks carries the reason its adapter gives in `lacks`;
`rig harness list` and docs/reference/harnesses.md print the table, and loading an experiment that
needs a factor or budget a harness lacks is refused with that reason (harnesses.registry).
"""

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from harnesses.cli import NODE_BIN
from harnesses.protocol import HarnessBase
from harnesses.registry import adapter_class, harness_names

USAGE_FIELDS = ("input", "output", "cache_read", "cache_write", "reasoning")
COMPACTION_FIELDS = (
    "compactions",
    "compaction_tokens_before",
    "compaction_tokens_after",
    "compaction_tokens",
)
NO_REASON = "no reason declared"
# What holds a CLI open after its answer, by the condition field its `silent_after_final` sets.
HELD_BY = {
    "harness_settings": "a hook in its settings",
    "extensions": "an extension of its own",
    "harness_args": "its arguments",
}
# What proves each kind of "yes" (tests/test_conformance.py and the tests it names run every
# registered harness through it).
PROOF = {
    "factor": "a condition using it is accepted at load and realised in the CLI's own request",
    "budget": "a real run is stopped past its budget (tests/test_run_budget.py)",
    "usage": "rig calibrate --harness: the parsed figure equals the mock's ledger",
    "compaction": "a compaction forced offline is counted (tests/test_compaction.py)",
    "fault": "rig calibrate --harness: each provider fault is infrastructure, a tool that never returns "
    "the agent's hang, a CLI its own hook or plugin keeps alive after its final answer is ended and "
    "scored on its work; its captured stream, replayed and held open, is ended (tests/test_after_final.py)",
    "version": "a condition runs the version it names (tests/test_harness_versions.py)",
}


@dataclass(frozen=True)
class Capability:
    """One capability of one harness: `detail` says how where it is `supported`, else why not."""

    group: str
    name: str
    supported: bool
    detail: str


@cache
def _pins() -> dict[str, str]:
    """npm package -> the exact version harnesses/node/package.json pins, read once."""
    return json.loads((NODE_BIN.parent.parent / "package.json").read_text())["dependencies"]


def pinned_version(cls: type[HarnessBase]) -> str | None:
    """The version harnesses/node/package.json pins for the adapter's npm package, if it has one."""
    package = getattr(cls, "package", None)
    return None if package is None else _pins().get(package)


def capabilities(name: str) -> list[Capability]:
    """Every capability of harness `name`, in the table's order."""
    cls = adapter_class(name)
    factors = cls.factors
    live = (
        "usage read from its stdout as it runs"
        if cls.live_usage
        else "usage read from its session file as it grows"
        if cls.session_usage
        else None
    )
    declared: list[tuple[str, str, str | None]] = [
        ("factor", "thinking", factors.thinking),
        ("factor", "append_system_prompt", factors.system_prompt),
        ("factor", "harness_settings", factors.settings_file and f"merged into {factors.settings_file}"),
        ("factor", "harness_args", ", ".join(sorted(factors.args)) or None),
        ("factor", "extensions", factors.extensions),
        ("budget", "run_budget.max_tokens", live),
        (
            "budget",
            "run_budget.max_cost_usd",
            ("its own cost, as it runs" if cls.live_cost else "priced with genai-prices for a priced model")
            if live
            else None,
        ),
        *(
            ("usage", field, "parsed from its session" if field in cls.usage_fields else None)
            for field in USAGE_FIELDS
        ),
        *(
            ("compaction", field, "parsed from its session" if field in cls.compaction_fields else None)
            for field in COMPACTION_FIELDS
        ),
        ("fault", "mock", cls.mock_protocol.name if cls.calibrated and cls.mock_protocol else None),
        (
            "fault",
            "retries_off",
            "its own retries of a failed request are off: the rig's quarantine retries"
            if cls.calibrated and not cls.provider_retries_s
            else None,
        ),
        (
            "fault",
            "after_final",
            "ended after [timeouts] after_final_s of silence after its final answer"
            if cls.final_event is not None
            else None,
        ),
        (
            "fault",
            "silent_after_final",
            "held open after its answer by "
            + " and ".join(HELD_BY.get(k, k) for k in sorted(cls.silent_after_final))
            + ": ended and scored on its work"
            if cls.silent_after_final
            else None,
        ),
        (
            "version",
            "harness_version",
            "installed from npm into the rig's cache" if cls.installs_versions else None,
        ),
    ]
    return [
        Capability(group, capability, how is not None, how or cls.lacks.get(capability, NO_REASON))
        for group, capability, how in declared
    ]


def table() -> dict[str, dict[str, object]]:
    """Every registered harness: its pinned version and capabilities (`rig harness list --json`)."""
    rows: dict[str, dict[str, object]] = {}
    for name in harness_names():
        rows[name] = {
            "pinned": pinned_version(adapter_class(name)),
            "capabilities": [
                {"group": c.group, "name": c.name, "supported": c.supported, "detail": c.detail}
                for c in capabilities(name)
            ],
        }
    return rows


def page() -> str:
    """docs/reference/harnesses.md: the capability table, then each harness's reasons."""
    names = harness_names()
    caps = {name: capabilities(name) for name in names}
    lines = [
        "# Harness capabilities",
        "",
        "What rig can measure on each harness, from the adapters' declarations (harnesses/capabilities.py);",
        "`rig harness list` prints the same. An experiment that needs a factor or a run budget its",
        'harness lacks is refused at load with the reason below. How each kind of "yes" is proved:',
        "",
        *(f"- {group}: {proof}" for group, proof in PROOF.items()),
        "",
        "| capability | "
        + " | ".join(f"{n} {pinned_version(adapter_class(n)) or ''}".strip() for n in names)
        + " |",
        "|---|" + "---|" * len(names),
    ]
    for index, first in enumerate(caps[names[0]]):
        cells = ["yes" if caps[n][index].supported else "no" for n in names]
        lines.append(f"| {first.group}: `{first.name}` | " + " | ".join(cells) + " |")
    for name in names:
        lines += ["", f"## {name}", ""]
        lines += [f"- `{c.name}`: {'yes' if c.supported else 'no'}: {c.detail}" for c in caps[name]]
    return "\n".join(lines) + "\n"


def undeclared() -> list[str]:
    """`harness: capability` for every capability a harness lacks without a reason in its `lacks`,
    and every `lacks` entry that names no capability or one the harness has."""
    problems = []
    for name in harness_names():
        caps = {c.name: c for c in capabilities(name)}
        for capability in caps.values():
            if not capability.supported and capability.detail == NO_REASON:
                problems.append(f"{name}: {capability.name} lacks a reason")
        for key in adapter_class(name).lacks:
            if key not in caps or caps[key].supported:
                problems.append(f"{name}: lacks names {key!r}, which is no capability it lacks")
    return problems


def cli_location(name: str) -> tuple[str, Path] | None:
    """Where harness `name`'s CLI is found, as (where, path): where is "$<VAR>", "checkout", "cache"
    or "PATH" (harnesses.cli.locate_cli), the path the one a run uses; None when it is not installed
    or the harness has no CLI."""
    from harnesses.cli_harness import CliHarness
    from harnesses.protocol import CliNotFound

    cls = adapter_class(name)
    if not issubclass(cls, CliHarness):
        return None
    try:
        return cls.locate_cli()
    except CliNotFound:
        return None
