"""Steps 5 and 6, check and hidden: the gate, then the hidden tests, in the rig's copy."""

from dataclasses import dataclass

from rig.confine.sandbox import Sandbox
from rig.run.steps.attempt import Attempt, InjectedFault, Trail, write_artifact
from rig.run.steps.collect import Collected
from rig.schema import CheckOutcome, HiddenOutcome
from rig.verify.checks import default_pycache, place_before_gate, run_check, run_hidden, warm_bytecode
from rig.verify.judged import judge_hidden


@dataclass(frozen=True)
class Verified:
    """Both verdicts as far as they went, and why verification broke off if it did."""

    check: CheckOutcome | None = None
    hidden: HiddenOutcome | None = None
    error: str | None = None


def verify(
    attempt: Attempt, *, trail: Trail, collected: Collected, sandbox: Sandbox | None = None
) -> Verified:
    """The pack's gate (hidden tests at their own paths already in place), then the hidden tests
    of the attempt's task, in the rig's copy that `collected` made, with a home made only now,
    both in the agent's `sandbox` if it had one (they run the agent's code); `check.json` and
    `hidden-junit.xml` go in the attempt folder. The task's judged tests decide (rig.verify.judged).

    Enters steps `check` and `hidden` on `trail`. A timeout or crash is a verdict with its reason
    (its error also on `trail.warnings`); an exception is `error`, never a dead runner.
    """
    task, folder, timeouts = attempt.task, attempt.folder, attempt.experiment.timeouts
    workdir = collected.verify_dir
    home = collected.verify_root / "verify-home"
    home.mkdir()
    pycache = default_pycache()
    check: CheckOutcome | None = None
    hidden: HiddenOutcome | None = None
    error: str | None = None
    try:
        trail.enter("check")
        gate = task.pack.spec.gate
        gate_timeout = gate.timeout_s or timeouts.check_s
        if sandbox is not None:
            warm_bytecode(task.pack, pycache, gate_timeout, attempt.project_env)
        place_before_gate(workdir, task.hidden_dir, task.placement)
        check = run_check(workdir, home, gate, gate_timeout, pycache, sandbox, attempt.project_env)
        write_artifact(folder / "check.json", check.model_dump_json(indent=2))
        trail.enter("hidden")
        ran = run_hidden(
            workdir,
            task.hidden_dir,
            folder / "hidden-junit.xml",
            home,
            task.pack.spec.runner,
            timeouts.hidden_s,
            pycache,
            sandbox,
            attempt.project_env,
            placement=task.placement,
        )
        hidden = judge_hidden(ran, task.judged)
    except InjectedFault:
        raise
    except Exception as exc:  # a broken verification is recorded with its reason, never a dead runner
        error = f"{type(exc).__name__}: {exc}"
    for outcome in (check, hidden):
        if outcome is not None and outcome.error:
            trail.warnings.append(outcome.error)
    return Verified(check=check, hidden=hidden, error=error)
