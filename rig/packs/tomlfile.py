"""Reading the rig's TOML inputs (experiments, packs, tasks) with one-line errors naming the fix."""

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError


def read_toml(path: Path, error: type[Exception]) -> dict[str, Any]:
    """The table of the TOML file at `path`; raises `error` with a one-line reason naming the file."""
    try:
        # TOML is UTF-8 by definition, whatever the locale says.
        return tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise error(f"{path}: cannot read it ({exc.strerror}); check the file") from None
    except UnicodeDecodeError as exc:
        raise error(
            f"{path}: not UTF-8 (byte {exc.start} cannot be decoded); save the file as UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML ({one_line(str(exc))}); fix the syntax") from None


def first_error(exc: ValidationError) -> tuple[str, str]:
    """Where the first validation error is (`a.b`, or `(top level)`) and its message, on one line."""
    err = exc.errors()[0]
    where = ".".join(str(part) for part in err["loc"]) or "(top level)"
    return where, one_line(err["msg"].removeprefix("Value error, "))


def one_line(text: str) -> str:
    """Error text on one line: a multi-line message would break the one-line error contract."""
    return " ".join(text.split())
