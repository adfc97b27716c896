"""The schema: every pydantic model that crosses a file boundary, and the defaults its fields need.

By what they describe: a pack and its tasks (`pack`), an experiment and its plan (`experiment`),
what an agent run produced (`agent`), the verdicts and the run record (`record`) and the reports
of the rig's commands (`reports`). This package imports nothing else of the project, so every
other layer imports its models from here (import-linter checks it, see pyproject.toml). Behaviour
that needs more than the standard library (loading a task, checking a harness name against the
registry) lives in the module that owns it.
"""

from rig.schema.agent import (  # noqa: F401
    AgentRun,
    BudgetStop,
    Metrics,
    ModelUsage,
    NetworkEndpoint,
    NetworkOutcome,
    StreamStats,
    Transcript,
    TranscriptStep,
    TranscriptToolCall,
)
from rig.schema.experiment import (  # noqa: F401
    NETWORK_POLICIES,
    Condition,
    Experiment,
    Limits,
    NetworkPolicy,
    PlanItem,
    Provider,
    RunBudget,
    Stopping,
    Timeouts,
    parse_host_port,
)
from rig.schema.pack import (  # noqa: F401
    COMMIT_SHA,
    DEFAULT_FILE_BYTES,
    DEFAULT_HEAD_BYTES,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_ENTRIES,
    DEFAULT_STALL_S,
    DEFAULT_TAIL_BYTES,
    EXACT_VERSION,
    MAX_TAIL_BYTES,
    PACK_NAME,
    BuiltEnvironment,
    Decoy,
    EnvironmentSpec,
    Expectation,
    GateSpec,
    Pack,
    PackSource,
    PackSpec,
    ProtectSpec,
    RunnerKind,
    RunnerSpec,
    Task,
    TaskSource,
    TaskSpec,
    test_glob_problem,
)
from rig.schema.record import (  # noqa: F401
    RECORD_SCHEMA_VERSION,
    RIG_SIDE_RULES,
    AgentOutcome,
    AuditFinding,
    CheckOutcome,
    HiddenOutcome,
    InfraVerdict,
    Pins,
    Protected,
    RunRecord,
    SandboxStatus,
    Tampering,
    Verification,
    WorkerJob,
    WorkspaceStats,
)
from rig.schema.reports import (  # noqa: F401
    CalibratedTask,
    CalibrationPins,
    CalibrationReport,
    Cell,
    Change,
    HarnessCheck,
    Item,
    ItemKind,
    ItemResult,
    MinedCommit,
    MineReport,
    MineVerdict,
    Protection,
    TaskStats,
)
