"""Write the Inspect AI eval logs the import tests read: one log per condition of a planted task, made
by the installed inspect_ai with its offline `mockllm/model` (no network, no key).

    python tests/data/imports/inspect/write_logs.py OUT_DIR [--format eval|json]

tests/test_import_inspect.py imports `write_logs` to write fresh logs with the inspect_ai of rig's dev
extra. The logs of an older inspect_ai committed beside this script (0.3.60/) were written once with
it, in a throwaway virtualenv, its dependencies as they were when 0.3.60 was released; to rewrite
them:

    uv venv -p 3.11 /tmp/inspect-old
    uv pip install -p /tmp/inspect-old/bin/python inspect_ai==0.3.60 --exclude-newer 2025-02-01
    cd tests/data/imports/inspect
    /tmp/inspect-old/bin/python write_logs.py 0.3.60 --format eval
    /tmp/inspect-old/bin/python write_logs.py 0.3.60 --format json

The plan: four samples, two epochs, two conditions. Each sample's metadata holds its grade per epoch,
which the `grade` scorer returns: C, I or P; E makes the solver raise (an errored sample), L makes it
hit a message limit (the sample is still scored, C). `reversed` scores the opposite (C <-> I). Every
model response has the usage of its condition (USAGE), so mockllm never counts tokens itself (which
would fetch a tokenizer).
"""

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

GRADES = {
    "baseline": {"s1": "CI", "s2": "II", "s3": "CC", "s4": "CL"},
    "treatment": {"s1": "CC", "s2": "CE", "s3": "CP", "s4": "IC"},
}
# Per model response: input tokens, output tokens, cache reads.
USAGE = {"baseline": (100, 20, 0), "treatment": (80, 10, 50)}
EPOCHS = 2


def _limit_error() -> Exception:
    try:
        from inspect_ai.util import LimitExceededError

        return LimitExceededError("message", value=5, limit=4, message="planted message limit")
    except ImportError:  # inspect_ai before LimitExceededError (0.3.60)
        from inspect_ai.util import SampleLimitExceededError

        return SampleLimitExceededError("message", value=5, limit=4, message="planted message limit")


def _outputs(condition: str) -> Iterator[object]:
    from inspect_ai.model import ModelOutput, ModelUsage

    tokens_in, tokens_out, cached = USAGE[condition]
    while True:
        output = ModelOutput.from_content(model="mockllm/model", content="an answer")
        output.usage = ModelUsage(
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            total_tokens=tokens_in + tokens_out + cached,
            input_tokens_cache_read=cached or None,
        )
        yield output


def _task(condition: str) -> object:
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import Score, Target, accuracy, scorer
    from inspect_ai.solver import Generate, TaskState, solver

    def grade(state: TaskState) -> str:
        letter = state.metadata["grades"][state.epoch - 1]
        return "C" if letter == "L" else letter

    @solver
    def planted() -> object:
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            state = await generate(state)
            letter = state.metadata["grades"][state.epoch - 1]
            if letter == "E":
                raise RuntimeError("planted error")
            if letter == "L":
                raise _limit_error()
            return state

        return solve

    @scorer(metrics=[accuracy()])
    def grade_scorer() -> object:
        async def score(state: TaskState, target: Target) -> Score:
            return Score(value=grade(state))

        return score

    @scorer(metrics=[accuracy()])
    def reversed_scorer() -> object:
        async def score(state: TaskState, target: Target) -> Score:
            return Score(value={"C": "I", "I": "C"}.get(grade(state), grade(state)))

        return score

    samples = [
        Sample(id=sample, input=f"{condition} {sample}", target="an answer", metadata={"grades": grades})
        for sample, grades in GRADES[condition].items()
    ]
    return Task(
        dataset=samples,
        solver=planted(),
        scorer=[grade_scorer(), reversed_scorer()],
        name=f"planted_{condition}",
    )


def write_logs(out: Path, fmt: str = "eval") -> dict[str, Path]:
    """One log per condition in `out`, named CONDITION.FORMAT; returns them by condition."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for condition in GRADES:
        model = get_model("mockllm/model", custom_outputs=_outputs(condition))
        (log,) = inspect_eval(
            _task(condition),
            model=model,
            epochs=EPOCHS,
            fail_on_error=False,
            log_dir=str(out / ".logs"),
            log_format=fmt,
            display="none",
        )
        target = out / f"{condition}.{fmt}"
        Path(log.location).replace(target)
        written[condition] = target
    (out / ".logs").rmdir()
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--format", choices=("eval", "json"), default="eval")
    args = parser.parse_args()
    for condition, path in write_logs(args.out, args.format).items():
        print(f"{condition}: {path}", file=sys.stderr)
