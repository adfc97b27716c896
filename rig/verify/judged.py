"""A task judged by test, not by file: the verdict of the hidden tests that decide it.

A mined task's hidden files are the fix commit's test files, whole: beside the tests the fix makes
pass (fail-to-pass) and those it keeps passing (pass-to-pass), they may hold tests that skip in
rig's environment (an optional dependency, translations not compiled) or fail whatever the code
(an interpreter difference). Those are outside the task: mining measured that they never pass with
the fix, so they can neither be asked of an agent nor tell a fix from a wrong one. The runner
still runs every test of the files (its exit code and report are cross-checked whole, its canaries
proved); only the judged tests' outcomes make the verdict. A judged test that is missing from the
report (deselected, renamed, its file no longer loading) failed.
"""

from rig.runners.junit import TESTS_FAILED
from rig.schema import HiddenOutcome

# How many test ids a one-line error names.
_NAMED = 3


def _named(tests: list[str]) -> str:
    more = f" and {len(tests) - _NAMED} more" if len(tests) > _NAMED else ""
    return ", ".join(tests[:_NAMED]) + more


def judge_hidden(outcome: HiddenOutcome, judged: frozenset[str] | None) -> HiddenOutcome:
    """`outcome` (every test of the hidden files, as rig.verify.checks.run_hidden reports them) as
    the task's `judged` tests decide it; None: every test decides, and a skip fails (hand-written
    tasks, and tasks mined before rig judged by test). An outcome that already failed as a whole
    (a crash, a timeout, a canary, a report that contradicts the exit code) stays as it is."""
    if judged is None or any(test.startswith("<") for test in outcome.failed):
        return outcome
    seen = {*outcome.passed, *outcome.failed, *outcome.skipped}
    missing = sorted(judged - seen)
    failed = [test for test in outcome.failed if test in judged] + missing
    skipped = [test for test in outcome.skipped if test in judged]
    # What stopped a missing test: most often its file's own failure (an import error), which the
    # report lists under the file's name alone (no `::test`), outside the judged tests.
    files = (t for t in outcome.failed if "::" not in t and t not in judged and t in outcome.problems)
    cause = next((outcome.problems[t] for t in files), "")
    problems = {test: outcome.problems.get(test, "") for test in failed if test in outcome.problems}
    problems.update({test: cause or "did not run: not in the runner's report" for test in missing})
    errors = []
    if missing:
        errors.append(f"{len(missing)} of {len(judged)} judged hidden tests did not run ({_named(missing)})")
    if skipped:
        shown = f"{len(skipped)} of {len(judged)} judged hidden tests"
        errors.append(f"{shown} were skipped or xfailed; a skip is a failure")
    return HiddenOutcome(
        exit_code=TESTS_FAILED if failed else 0,
        ok=not failed and not skipped,
        collected=len(judged & seen),
        outside=len(seen - judged),
        failed=failed,
        skipped=skipped,
        error="; ".join(errors) or None,
        passed=[test for test in outcome.passed if test in judged],
        problems=problems,
    )
