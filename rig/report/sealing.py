"""Which scored runs were not sealed: their agent ran without the sandbox (`--sandbox off`, or `auto`
on a machine without bubblewrap), so it could read the hidden tests, the reference solutions and any
copy of the project on the machine, and its success is no evidence.

A run is unsealed when its `sealed` column (rig.store.columns, from the record's `sandbox.active`)
is False in load_runs' frame. A record without a sandbox verdict (an imported one, whose source
never said; or one from before the field) holds None there and is not counted: nothing says it was
unsealed.
"""

from typing import Any

import pandas as pd

from rig.report.failures import code


def counts(df: pd.DataFrame, arms: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """Of load_runs' frame `df`, the unsealed runs of each arm that has one and the scored runs of
    each arm, both in the order of `arms` (the arms' declared order)."""
    if df.empty:
        return {}, dict.fromkeys(arms, 0)
    scored = df["condition"].value_counts()
    unsealed = df.loc[df["sealed"].eq(False), "condition"].value_counts()
    return (
        {arm: int(unsealed[arm]) for arm in arms if arm in unsealed.index},
        {arm: int(scored.get(arm, 0)) for arm in arms},
    )


def unsealed_json(unsealed: dict[str, int], scored: dict[str, int]) -> dict[str, Any] | None:
    """report.json's `unsealed_runs`: how many scored runs were not sealed, of how many, and per arm
    affected; None (no field) when every run was sealed. The arguments are those `counts` returns."""
    count = sum(unsealed.values())
    if not count:
        return None
    return {"count": count, "scored": sum(scored.values()), "by_arm": unsealed}


def unsealed_text(unsealed: dict[str, int], scored: dict[str, int], arm_word: str) -> str | None:
    """The report's line about the unsealed runs, naming each arm affected with its share (the
    arguments are those `counts` returns); None when every run was sealed."""
    count = sum(unsealed.values())
    if not count:
        return None
    per_arm = ", ".join(f"{code(arm)} {n} of {scored.get(arm, 0)}" for arm, n in unsealed.items())
    return (
        f"**Not sealed:** {count} of {sum(scored.values())} scored runs {'was' if count == 1 else 'were'} "
        "not sealed (sandbox off or unavailable: the agent could read the hidden tests and the answers); "
        f"their successes are not evidence. Per {arm_word}: {per_arm} (docs/confinement.md)."
    )
