"""`rig mock-model serve`: the scripted mock model server."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    pass

from rig.cli.common import fail, interruptible
from rig.cli.main import app

mock_app = typer.Typer(help="The scripted mock model server.", no_args_is_help=True)
app.add_typer(mock_app, name="mock-model")


@mock_app.command("serve")
def mock_serve(
    task: Annotated[str, typer.Option(help="Task whose patches the policy replays.")] = "t1_fix_pagination",
    policy: Annotated[
        str, typer.Option(help="solution, decoy, nothing, delete_confirmed or delete_unconfirmed.")
    ] = "solution",
    decoy: Annotated[str | None, typer.Option(help="Decoy name, with --policy decoy.")] = None,
    fault: Annotated[
        str, typer.Option(help="none, http_error, silence, never_answer or cut_stream.")
    ] = "none",
    status: Annotated[int, typer.Option(help="HTTP status for --fault http_error.")] = 500,
    first_n: Annotated[int | None, typer.Option(help="Misbehave on the first N requests only.")] = None,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port).")] = 0,
    harness: Annotated[
        str | None,
        typer.Option(
            help="Serve this harness's protocol with its tool names (default: every harness's; where "
            "two share a path, the first registered)."
        ),
    ] = None,
    pack: Annotated[
        Path | None, typer.Option(help="The task pack of --task (default: the built-in pack).")
    ] = None,
) -> None:
    """Serve the mock model on 127.0.0.1 until interrupted, then print its ledger."""
    import json
    import time
    from dataclasses import asdict

    from harnesses.mock_model.server import Faults, MockModelServer
    from harnesses.mock_model.session import policy_for
    from harnesses.registry import HarnessUnavailable, mock_protocols
    from rig.packs.manifest import PackError, load_pack, option_pack
    from rig.packs.tasks import TaskError, load_tasks

    if fault not in ("none", "http_error", "silence", "never_answer", "cut_stream"):
        raise fail(f"unknown fault {fault!r}; use none, http_error, silence, never_answer or cut_stream")
    try:
        (loaded,) = load_tasks(load_pack(option_pack(pack)), [task])
        chosen = policy_for(loaded, {"mock_policy": policy, "decoy": decoy})
        protocols = mock_protocols((harness,) if harness else None)
    except (PackError, TaskError, ValueError, HarnessUnavailable) as exc:
        raise fail(str(exc)) from exc
    faults = Faults(mode=fault, status=status, first_n=first_n)  # type: ignore[arg-type]
    server = MockModelServer(chosen, protocols, faults=faults, listen_port=port).start()
    try:
        with interruptible():
            # Announced once Ctrl-C and SIGTERM are handled: a caller that stops the server as soon
            # as it reads this line (a background job, SIGINT ignored) is never ignored.
            typer.echo(f"mock model ({chosen.name}) on {server.base_url}  (Ctrl-C to stop)")
            # Woken every second: a signal the kernel hands to a server thread still raises here.
            while True:
                time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        typer.echo(json.dumps([asdict(e) for e in server.ledger], indent=2))
