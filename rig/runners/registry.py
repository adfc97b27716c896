"""Every hidden-test runner kind a pack may name, one line each; the kinds live in their modules.

A kind is added by writing its module (a `rig.runners.base.Kind`) and one line here; its name goes
into the schema's RunnerKind. Code outside rig/runners asks `kind_of` and never names a kind.
"""

from rig.runners.base import Kind
from rig.runners.command import COMMAND
from rig.runners.jest import JEST
from rig.runners.mocha import MOCHA
from rig.runners.node_test import NODE_TEST
from rig.runners.pytest import PYTEST
from rig.runners.vitest import VITEST
from rig.schema import RunnerKind

# In `rig pack new`'s order of preference: the first kind whose detect() answers is the guess.
KINDS: dict[RunnerKind, Kind] = {
    "pytest": PYTEST,
    # Before node-test, whose test-file names (*.test.ts) vitest's, jest's and mocha's tests have too.
    "vitest": VITEST,
    "jest": JEST,
    "mocha": MOCHA,
    "node-test": NODE_TEST,
    "command": COMMAND,
}


def kind_of(name: RunnerKind) -> Kind:
    """The runner kind a pack's [runner] kind names."""
    return KINDS[name]
