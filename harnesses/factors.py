"""Condition factors beyond the workspace, as each adapter declares it realises them.

An adapter class declares `factors = Factors(...)`, as Harbor's installed agents declare their
flags: how appended system-prompt text reaches its model, which private config file
`harness_settings` merge into and which top-level keys they may set, which options `harness_args`
may pass (none that moves logs, the model endpoint or the sandbox), how it loads extensions. The
engine knows no harness by name: `check_condition` compares a condition with the declaration when
the config is loaded, and a factor the harness lacks is one line naming the harness, the factor and
the fix. `mapping` says in the record what each factor became.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rig.paths import local
from rig.schema import Condition


@dataclass(frozen=True)
class Factors:
    """What an adapter realises of a condition's factors; None or empty: it has no equivalent."""

    system_prompt: str | None = None
    """How `append_system_prompt` reaches the model, as the record says it."""
    settings_file: str | None = None
    """The config file in the run's private config directory that `harness_settings` merge into."""
    settings_keys: frozenset[str] = frozenset()
    """The top-level keys `harness_settings` may set."""
    args: Mapping[str, int] = field(default_factory=dict)
    """The options `harness_args` may pass, with how many values each takes (0 or 1)."""
    extensions: str | None = None
    """How `extensions` are loaded, as the record says it."""
    thinking: str | None = None
    """How a thinking level (the experiment's or a condition's `thinking`) reaches the CLI."""


def check_condition(
    harness: str, factors: Factors, condition: Condition, lacks: Mapping[str, str] | None = None
) -> None:
    """Raise ValueError (one line: the field, the problem, why, the fix) for a factor of `condition`
    that `harness`, declaring `factors`, cannot realise; `lacks` (the adapter's) gives the why."""
    where = f"conditions.{condition.name}"

    def missing(factor: str, problem: str, fix: str) -> ValueError:
        reason = (lacks or {}).get(factor)
        return ValueError(
            f"{where}.{factor}: harness {harness!r} {problem}{f' ({reason})' if reason else ''}; {fix}"
        )

    if condition.thinking is not None and factors.thinking is None:
        raise missing("thinking", "has no thinking level to set", "remove it")
    if condition.append_system_prompt is not None and factors.system_prompt is None:
        raise missing(
            "append_system_prompt",
            "has no way to append to its system prompt",
            "remove it (write_files can add a context file instead)",
        )
    if condition.harness_settings:
        if factors.settings_file is None:
            raise missing("harness_settings", "takes no settings", "remove them")
        unknown = sorted(set(condition.harness_settings) - factors.settings_keys)
        if unknown:
            raise ValueError(
                f"{where}.harness_settings: {harness!r} does not take {', '.join(map(repr, unknown))} in its "
                f"{factors.settings_file}; use {', '.join(sorted(factors.settings_keys))}"
            )
    if condition.harness_args:
        if not factors.args:
            raise missing("harness_args", "takes no command-line options", "remove them")
        check_args(harness, factors.args, condition.harness_args, where)
    if condition.extensions:
        if factors.extensions is None:
            raise missing("extensions", "loads no extensions", "remove them")
        for extension in condition.extensions:
            if not extension_path(extension).is_file():
                raise ValueError(
                    f"{where}.extensions: {extension!r} is no file (paths are relative to the "
                    "experiment file, or absolute); fix the path"
                )


def check_args(
    harness: str, allowed: Mapping[str, int], args: list[str], where: str = "harness_args"
) -> None:
    """Raise ValueError unless every argument is an allowed option (`--opt=value` or `--opt value`
    for one that takes a value)."""
    index = 0
    while index < len(args):
        name, equals, _ = args[index].partition("=")
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise ValueError(
                f"{where}.harness_args: {harness!r} does not allow {args[index]!r}; allowed options: {known}"
            )
        takes = allowed[name]
        if takes == 0 and equals:
            raise ValueError(
                f"{where}.harness_args: {name} takes no value; remove '={args[index][len(name) + 1 :]}'"
            )
        if takes == 1 and not equals:
            if index + 1 >= len(args):
                raise ValueError(f"{where}.harness_args: {name} needs a value; give {name}=VALUE")
            index += 1
        index += 1


def extension_path(extension: str) -> Path:
    """An extension's file, as a design stores it (`rig.paths.local`)."""
    return local(extension)


def merge(base: dict[str, Any], fragment: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `fragment` merged in: tables merged key by key, any other value replaced."""
    merged = dict(base)
    for key, value in fragment.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def mapping(factors: Factors, condition: Condition, extensions: list[str] | None = None) -> list[str]:
    """What each factor of `condition` became for a harness declaring `factors`, for condition_mapping;
    `extensions` names the copies that were loaded."""
    parts = []
    if condition.append_system_prompt is not None:
        parts.append(
            f"append_system_prompt ({len(condition.append_system_prompt)} chars): {factors.system_prompt}"
        )
    if condition.harness_settings:
        keys = ", ".join(sorted(condition.harness_settings))
        parts.append(f"harness_settings merged into {factors.settings_file}: {keys}")
    if condition.harness_args:
        parts.append(f"harness_args: {' '.join(condition.harness_args)}")
    if condition.extensions:
        parts.append(f"extensions {factors.extensions}: {', '.join(extensions or condition.extensions)}")
    return parts
