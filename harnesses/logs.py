"""What every adapter's parser shares: tolerant JSONL reading and the behaviour derived from commands."""

import json
from pathlib import Path
from typing import Any

from harnesses import shell
from harnesses.base import Metrics


def read_jsonl(path: Path | None) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, skipping lines that do not parse (a torn last line)."""
    if path is None or not path.is_file():
        return []
    events = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def as_int(value: Any) -> int:
    """An integer count from a log field; anything else (None, bool, text) counts as 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def relative_path(path: str, cwd: str | None) -> str:
    """A read path relative to the workspace: `./` and the workspace's absolute prefix removed."""
    if cwd and path.startswith(cwd.rstrip("/") + "/"):
        path = path[len(cwd.rstrip("/")) + 1 :]
    while path.startswith("./"):
        path = path[2:]
    return path


def fold_pi_assistant(metrics: Metrics, message: dict[str, Any], read_order: list[str]) -> float | None:
    """Fold one assistant message of a Pi-format session into `metrics`; return its cost, if any.

    Pi writes this format, and the scripted agent imitates it so that the same parsing is tested.
    """
    metrics.assistant_messages += 1
    stop_reason = message.get("stopReason")
    if isinstance(stop_reason, str):
        metrics.stop_reasons.append(stop_reason)
    if message.get("errorMessage"):
        metrics.error_messages.append(str(message["errorMessage"]))
    content = message.get("content") if isinstance(message.get("content"), list) else []
    texts = []
    for item in content:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "text":
            texts.append(str(item.get("text", "")))
        elif item.get("type") == "toolCall":
            name = str(item.get("name"))
            arguments = item.get("arguments") if isinstance(item.get("arguments"), dict) else {}
            metrics.tool_calls += 1
            metrics.tool_calls_by_name[name] = metrics.tool_calls_by_name.get(name, 0) + 1
            if name == "bash" and isinstance(arguments.get("command"), str):
                metrics.bash_commands.append(arguments["command"])
                read_order.extend(shell.read_paths(arguments["command"]))
            elif name == "read" and isinstance(arguments.get("path"), str):
                read_order.append(arguments["path"])
    if stop_reason == "stop":
        metrics.final_text = "\n".join(texts)
    usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
    metrics.input_tokens += as_int(usage.get("input"))
    metrics.output_tokens += as_int(usage.get("output"))
    metrics.cache_read_tokens += as_int(usage.get("cacheRead"))
    metrics.cache_write_tokens += as_int(usage.get("cacheWrite"))
    # Pi 0.73.1 keeps no reasoning count (OpenAI's output already includes it); read it if a
    # later version adds one.
    metrics.reasoning_tokens += as_int(usage.get("reasoning"))
    metrics.total_tokens += as_int(usage.get("totalTokens"))
    cost = usage.get("cost")
    if isinstance(cost, dict) and isinstance(cost.get("total"), int | float):
        return float(cost["total"])
    return None


def derive_behaviour(
    metrics: Metrics, read_order: list[str], cwd: str | None, skill_invoked: bool = False
) -> None:
    """Fill the behaviour fields from the reads and shell commands a parser collected.

    Read paths are made relative to the workspace and deduplicated in order; docs, SKILL.md,
    searches, check.py and pytest runs are judged by `harnesses.shell`, the same for every harness.
    """
    seen: set[str] = set()
    for raw in read_order:
        path = relative_path(raw, cwd)
        if path and path not in seen:
            seen.add(path)
            metrics.read_paths.append(path)
    metrics.docs_read = [p for p in metrics.read_paths if shell.is_doc(p)]
    metrics.read_skill = skill_invoked or any(shell.is_skill(p) for p in metrics.read_paths)
    metrics.bash_search_commands = [c for c in metrics.bash_commands if shell.is_search(c)]
    metrics.ran_check_script = any(shell.runs_check_script(c) for c in metrics.bash_commands)
    metrics.ran_pytest = any(shell.runs_pytest(c) for c in metrics.bash_commands)
