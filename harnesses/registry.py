"""Which adapter runs which harness name."""

from harnesses.base import DEFAULT_STALL_S, HarnessAdapter
from rig.tasks import Task


class HarnessUnavailable(Exception):
    """A harness name with no adapter in this version of rig."""


def make_adapter(name: str, task: Task, stall_s: float = DEFAULT_STALL_S) -> HarnessAdapter:
    """A fresh adapter for one run of `task`."""
    if name == "scripted":
        from harnesses.scripted import ScriptedHarness

        return ScriptedHarness(task, stall_s=stall_s)
    raise HarnessUnavailable(f"harness {name!r} has no adapter in this version of rig; use 'scripted'")
