"""The agent's only way out of its network namespace: run inside the sandbox, before the agent.

    python -I -S netrelay.py --socket PATH [--lo-up [--as-user UID:GID]] --proxy-port N
        [--endpoint HOST:PORT ...] -- ARGV
    python -I -S netrelay.py --exec-as UID:GID -- ARGV

It listens on 127.0.0.1:N (the proxy the agent's HTTP(S)_PROXY and ALL_PROXY name) and on each
model endpoint's own loopback address and port (so a harness that ignores proxies still reaches
its model at the URL it was given), then runs ARGV and exits as it does. Every connection accepted
is passed over the Unix socket PATH, bound into the sandbox, to the rig's egress proxy on the host
(rig.confine.network), which decides, logs and relays: this process decides nothing. The first line it
sends names the connection: `T <host> <port>` for an endpoint's address, `P` for the proxy port.

Standard library only, one file: the sandbox shows this file (rig.run.runner exposes it), not the
rig's own package.
`--lo-up` brings the loopback interface up first (unshare's new namespace has it down; bubblewrap's
has it up), which needs this process to be root of the namespace. `--as-user UID:GID` then runs
ARGV as UID:GID in a user namespace nested in this one (through `--exec-as`, a fresh process of this
file that enters it and execs ARGV): there it has no capability over the network namespace, which
the outer user namespace owns, so it can neither take `lo` down nor change routes.
"""

import argparse
import asyncio
import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys
from asyncio import StreamReader, StreamWriter
from collections.abc import Awaitable, Callable

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_CLONE_NEWUSER = 0x10000000
_CHUNK = 64 * 1024


def loopback_up() -> None:
    """Bring `lo` up in this network namespace (needs CAP_NET_ADMIN in it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, _SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))


def enter_user_namespace(uid: int, gid: int) -> None:
    """Move this process into a new user namespace as `uid`:`gid`, mapped onto its own ids.

    The kernel allows it only to a single-threaded process. In the new namespace the process has
    capabilities only over what that namespace owns (not the network namespace it is in), and an
    execve as a non-zero uid drops even those.
    """
    outer_uid, outer_gid = os.geteuid(), os.getegid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWUSER) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare(CLONE_NEWUSER): {os.strerror(errno)}")
    # gid_map can be written only once setgroups is denied: the process has no CAP_SETGID outside.
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{uid} {outer_uid} 1"),
        ("gid_map", f"{gid} {outer_gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _ids(text: str) -> tuple[int, int]:
    uid, _, gid = text.partition(":")
    return int(uid), int(gid)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


def _handler(socket_path: str, preamble: bytes) -> Callable[[StreamReader, StreamWriter], Awaitable[None]]:
    """A connection handler that passes each connection, after `preamble`, to the Unix socket."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(socket_path)
        except OSError:
            writer.close()
            return
        up_writer.write(preamble)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        for w in (writer, up_writer):
            w.close()

    return handle


async def _serve(args: argparse.Namespace) -> int:
    servers = [await asyncio.start_server(_handler(args.socket, b"P\n"), "127.0.0.1", args.proxy_port)]
    for endpoint in args.endpoint:
        host, _, port = endpoint.rpartition(":")
        preamble = f"T {host} {port}\n".encode()
        bind = "127.0.0.1" if host == "localhost" else host
        servers.append(await asyncio.start_server(_handler(args.socket, preamble), bind, int(port)))
    argv = args.argv
    if args.as_user is not None:
        # A fresh process, single-threaded as unshare(CLONE_NEWUSER) needs: this one has asyncio's threads.
        uid, gid = args.as_user
        argv = [sys.executable, "-I", "-S", os.path.abspath(__file__), "--exec-as", f"{uid}:{gid}"]
        argv += ["--", *args.argv]
    agent = await asyncio.create_subprocess_exec(*argv)
    code = await agent.wait()
    for server in servers:
        server.close()
    return code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket")
    parser.add_argument("--proxy-port", type=int)
    parser.add_argument("--endpoint", action="append", default=[])
    parser.add_argument("--lo-up", action="store_true")
    parser.add_argument("--as-user", type=_ids, metavar="UID:GID")
    parser.add_argument("--exec-as", type=_ids, metavar="UID:GID")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    args.argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if args.exec_as is not None:
        enter_user_namespace(*args.exec_as)
        os.execvp(args.argv[0], args.argv)
    if args.socket is None or args.proxy_port is None:
        parser.error("--socket and --proxy-port are required")
    if args.lo_up:
        loopback_up()
    if not args.argv:
        return  # a probe: the namespace and its loopback work
    code = asyncio.run(_serve(args))
    sys.stdout.flush()
    if code < 0:
        # Killed by a signal: die of the same one, as a shell would report it.
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


if __name__ == "__main__":
    main()
