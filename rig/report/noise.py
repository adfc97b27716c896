"""The report's flakiness table (pass^k and the flip rate per arm) and the experiment's noise floor
(the A/A experiments `rig aa` ran beside it), as the blocks of rig.report.document."""

import glob
import json
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from rig.analysis import (
    POPULATION,
    Comparison,
    NoiseFloor,
    PoolingError,
    copy_name,
    flakiness,
    load_runs,
    noise_floor,
    pass_column,
)
from rig.analysis.noise import AA_INFIX, aa_arm
from rig.report.comparisons import fmt_effect
from rig.report.document import DASH, Block, Heading, Para, Table, fmt_ci_pct, fmt_p, fmt_pct, is_missing
from rig.report.failures import code
from rig.report.sources import Source
from rig.schema import Experiment
from rig.store.migrate import DuplicateRunWarning


def flakiness_blocks(df: pd.DataFrame, arms: list[str], arm_word: str) -> list[Block]:
    """pass^1..pass^K and the flip rate per arm (rig.analysis.flakiness), in the arms' order."""
    if df.empty:
        return []
    table = flakiness(df).set_index("condition")
    k_all = max(int(k) for k in table["k_max"])
    rows = []
    for arm in arms:
        if arm not in table.index:
            continue
        row = table.loc[arm]
        # One row of mixed columns comes back as floats: the counts are whole numbers again here.
        tasks, k_max, flipping, flip_tasks = (
            int(row[c]) for c in ("tasks", "k_max", "flipping", "flip_tasks")
        )
        passes = [fmt_pct(row[pass_column(k)]) if k <= k_max else DASH for k in range(1, k_all + 1)]
        rows.append(
            [
                code(arm),
                str(tasks),
                str(k_max),
                *passes,
                f"{flipping} of {flip_tasks}",
                fmt_pct(row["flip_rate"]),
                fmt_ci_pct(row["flip_ci_low"], row["flip_ci_high"]),
            ]
        )
    headers = [
        arm_word,
        "tasks",
        "K (fewest runs of a task)",
        *(f"pass^{k}" for k in range(1, k_all + 1)),
        "tasks flipping",
        "flip rate",
        "95% CI (exact, over tasks)",
    ]
    return [
        Heading(3, f"Flakiness per {arm_word}"),
        Para(
            "pass^k: the chance that k runs of a task all pass, averaged over the tasks (each task's "
            "unbiased estimate C(c, k) / C(n, k) from its c successes in n runs; K is the fewest runs any "
            "task has). pass^1 is the mean per-task success rate; the faster pass^k falls with k, the more "
            "of the success is luck. Flip rate: the share of tasks whose repetitions disagree (some passed, "
            "some failed), over the tasks run at least twice, with its exact (Clopper-Pearson) interval over "
            "tasks; it grows with the repetitions, so compare it at equal repetitions."
        ),
        Table(headers, rows, frozenset(range(1, len(headers)))),
    ]


def aa_folders(source: Source) -> list[tuple[str, Path, dict[str, Any]]]:
    """(arm, folder, the arm's condition as it ran) of every A/A experiment `rig aa` ran of
    `source`'s experiment: the results folders beside it named `<experiment>-aa-...` whose design is
    an arm and its copy (rig.analysis.noise.aa_arm) and that hold runs."""
    found = []
    pattern = str(source.folder.parent / f"{glob.escape(source.name)}{AA_INFIX}*")
    for folder in sorted(Path(p) for p in glob.glob(pattern)):
        try:
            raw = json.loads((folder / "experiment.json").read_text())
        except (OSError, ValueError):
            continue
        design = raw.get("experiment", raw) if isinstance(raw, dict) else {}
        arm = aa_arm(design, source.name) if isinstance(design, dict) else None
        if arm is not None and (folder / "runs.jsonl").is_file():
            found.append((arm, folder, design["conditions"][0]))
    return found


def _planned_repetitions(source: Source) -> int | None:
    """The repetitions the A/B experiment planned, at which its noise floor is stated."""
    try:
        return Experiment.model_validate(source.design).planned_repetitions
    except ValidationError:
        return None


def _changed(source: Source, ran: dict[str, Any]) -> bool:
    """Whether the arm's settings in the A/B design differ from `ran`, those the A/A ran with.
    Only the settings both designs record are compared: a rig that added one since wrote one side."""
    ours = next((c for c in source.design.get("conditions", []) if c.get("name") == ran["name"]), None)
    return ours is not None and any(ours[key] != ran[key] for key in ours.keys() & ran.keys())


def noise_floor_blocks(sources: list[Source], comparisons: list[Comparison]) -> list[Block]:
    """The noise floor of each experiment with an A/A folder: the A/A difference with its 95% CI
    and p, and the minimal detectable effect at the experiment's size, then each success effect of
    the report beside the noise floor of its reference arm (else of its other arm)."""
    estimand = next((c.estimand for c in comparisons if c.metric == "success"), POPULATION)
    floors: dict[str, NoiseFloor] = {}
    rows, notes = [], []
    for source in sources:
        for arm, folder, ran in aa_folders(source):
            label = f"{code(arm)} of {code(source.name)}"
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DuplicateRunWarning)
                    df = load_runs(folder, paths=False)
                # The MDE at the A/B's size; no false-positive simulation here (`rig aa` prints it).
                floor = noise_floor(
                    df, arm, copy_name(arm), estimand=estimand, reps=_planned_repetitions(source), n_sim=0
                )
            except (PoolingError, ValueError) as exc:
                notes.append(f"{label} ({code(folder.name)}): cannot be read: {exc}")
                continue
            floors.setdefault(arm, floor)
            if _changed(source, ran):
                notes.append(f"{label}: its settings have changed since {code(folder.name)} ran it")
            effect, ci = fmt_effect(floor.difference)
            rows.append(
                [
                    label,
                    code(folder.name),
                    f"{floor.difference.n_a} / {floor.difference.n_b}",
                    effect,
                    ci,
                    fmt_p(floor.difference.p_value),
                    _mde(floor),
                    f"{fmt_pct(floor.base_rate)}, {floor.task_spread:.2f}",
                    floor.difference.note or floor.note or "",
                ]
            )
    if not rows and not notes:
        return []
    blocks: list[Block] = [
        Heading(3, "Noise floor (A/A)"),
        Para(
            "The same arm run twice as two conditions (`rig aa`, docs/noise-floor.md): any difference "
            "between the copies is chance. A/A difference: the copy against the arm, with the interval and "
            "test of the comparisons above. MDE: the smallest difference in success rate that test finds "
            "with 80% power at alpha 0.05 at this experiment's tasks and repetitions, assuming the A/A's "
            "success rate as the base rate and its tasks' spread in difficulty (logit scale, binomial noise "
            "taken out). `rig aa` also gives the false-positive rate the design implies."
        ),
    ]
    if rows:
        headers = [
            "arm",
            "A/A results",
            "runs (arm / copy)",
            "A/A difference",
            "95% CI",
            "p",
            "MDE (80% power)",
            "base rate, task spread",
            "note",
        ]
        blocks.append(Table(headers, rows, frozenset({2, 3, 4, 5, 6})))
    if notes:
        blocks.append(Para("; ".join(notes) + "."))
    beside = []
    for c in comparisons:
        floor = floors.get(c.a) or floors.get(c.b)
        if c.metric != "success" or floor is None:
            continue
        effect, ci = fmt_effect(c)
        aa_effect, aa_ci = fmt_effect(floor.difference)
        beside.append(
            [f"{code(c.b)} vs {code(c.a)}", effect, ci, code(floor.arm), f"{aa_effect} {aa_ci}", _mde(floor)]
        )
    if beside:
        blocks.append(
            Para(
                "Each success effect beside the noise floor of its reference arm: an effect no larger than "
                "the A/A difference is of a size chance alone produced here, and one below the MDE had less "
                "than an 80% chance of being found at this size, real or not."
            )
        )
        headers = ["B vs A", "effect", "95% CI", "A/A of", "A/A difference [95% CI]", "MDE (80% power)"]
        blocks.append(Table(headers, beside, frozenset({1, 2, 4, 5})))
    return blocks


def _mde(floor: NoiseFloor) -> str:
    return DASH if is_missing(floor.mde) else f"{floor.mde * 100:.1f} pp"
