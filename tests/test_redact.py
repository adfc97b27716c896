"""Redaction: machine paths, the user and the host never survive in saved text or files."""

import os
import socket
import stat
from pathlib import Path

import pytest

from rig.store.redact import Redactor

USER = "zq_fake_user"
HOST = "zq-fake-host.example"


@pytest.fixture
def machine(tmp_path: Path) -> dict[str, Path]:
    home = tmp_path / "home" / USER
    runs = home / ".cache" / "rig" / "runs"
    repo = tmp_path / "src" / "rig-repo"
    for d in (runs, repo):
        d.mkdir(parents=True)
    return {"home": home, "runs": runs, "repo": repo}


@pytest.fixture
def redactor(machine: dict[str, Path]) -> Redactor:
    return Redactor.for_machine(machine["runs"], machine["repo"], home=machine["home"], user=USER, host=HOST)


def test_text_redacts_everything(machine: dict[str, Path], redactor: Redactor) -> None:
    home, runs, repo = machine["home"], machine["runs"], machine["repo"]
    s = (
        f"cd {repo}/tasks && cat {home}/.bashrc\n"
        f"session at {runs}/t1.pi.0/attempt-1/session.jsonl\n"
        f"{USER}@{HOST}:~$ whoami -> {USER}; short host zq-fake-host, shouting ZQ-FAKE-HOST.EXAMPLE\n"
        f'{{"cwd": "{home}", "user": "{USER}"}}\n'
    )
    out = redactor.text(s)
    assert out == (
        "cd <REPO>/tasks && cat <HOME>/.bashrc\n"
        "session at <RUNS>/t1.pi.0/attempt-1/session.jsonl\n"
        "<user>@<host>:~$ whoami -> <user>; short host <host>, shouting <host>\n"
        '{"cwd": "<HOME>", "user": "<user>"}\n'
    )
    for secret in (str(home), str(runs), str(repo), USER, "zq-fake-host", "zq-fake-host".upper()):
        assert secret not in out


def test_paths_spelled_as_folder_names_are_redacted(machine: dict[str, Path], redactor: Redactor) -> None:
    # Claude Code keeps a project's files in projects/<its path, every other character a "->/.
    home, runs = machine["home"], machine["runs"]
    dashed_runs = "".join(c if c.isalnum() else "-" for c in str(runs))
    dashed_home = "".join(c if c.isalnum() else "-" for c in str(home))
    s = (
        f"memory at {home}/.claude/projects/{dashed_runs}-exp-t1-work/memory/\n"
        f"projects/{dashed_home}-src-app/\n"
        f"not the user: {dashed_home}x\n"
    )
    out = redactor.text(s)
    assert out == (
        "memory at <HOME>/.claude/projects/<RUNS>-exp-t1-work/memory/\n"
        "projects/<HOME>-src-app/\n"
        f"not the user: {dashed_home}x\n"
    )
    assert redactor.text(out) == out
    assert redactor.data(s.encode()) == out.encode()


def test_runs_wins_over_home(machine: dict[str, Path], redactor: Redactor) -> None:
    path = machine["runs"] / "x" / "stdout.txt"
    assert redactor.text(str(path)) == "<RUNS>/x/stdout.txt"
    assert redactor.text(str(machine["home"] / ".cache")) == "<HOME>/.cache"


def test_verification_copies_in_memory_and_on_disk(machine: dict[str, Path]) -> None:
    shm = Path("/dev/shm/rig-1000")
    in_memory = Redactor.for_machine(
        machine["runs"], machine["repo"], home=machine["home"], user=USER, host=HOST, verify_root=shm
    )
    assert (
        in_memory.text(f"copy {shm}/exp-0a1b/verify-x/work failed")
        == "copy <VERIFY>/exp-0a1b/verify-x/work failed"
    )
    # On disk the copies sit beside the workspaces, in the runs root: named for that.
    on_disk = Redactor.for_machine(
        machine["runs"],
        machine["repo"],
        home=machine["home"],
        user=USER,
        host=HOST,
        verify_root=machine["runs"],
    )
    assert on_disk.text(str(machine["runs"] / "exp" / "verify-x")) == "<RUNS>/exp/verify-x"
    assert on_disk.text("<VERIFY>/x") == "<VERIFY>/x"


def test_paths_and_names_only_match_whole(machine: dict[str, Path], redactor: Redactor) -> None:
    home = str(machine["home"])
    # A sibling directory that merely starts with the home path is another path.
    assert redactor.text(f"{home}2/file") == f"{Path(home).parent}/{USER}2/file"
    assert redactor.text(f"{USER}_backup {USER}. ({USER})") == f"{USER}_backup <user>. (<user>)"


def test_root_user_whole_words_only(tmp_path: Path) -> None:
    r = Redactor.for_machine(
        tmp_path / "runs", tmp_path / "repo", home=Path("/root"), user="root", host="box"
    )
    assert (
        r.text("rootdir /srv/rootfs chroot root_cause roots") == "rootdir /srv/rootfs chroot root_cause roots"
    )
    assert r.text("/home/root/x") == "/home/<user>/x"
    assert r.text("running as user root.") == "running as user <user>."
    assert r.text("/root/.config -I/root/include x=/root") == "<HOME>/.config -I<HOME>/include x=<HOME>"
    assert r.text("box.local and boxes") == "<host>.local and boxes"


def test_value_recurses_but_keeps_keys(machine: dict[str, Path], redactor: Redactor) -> None:
    home = str(machine["home"])
    obj = {
        USER: {"paths": [home, (f"{home}/a", 3)], "n": 1.5, "ok": True, "none": None},
        "hosts": [HOST, [HOST, {"deep": f"{USER}@{HOST}"}]],
    }
    assert redactor.value(obj) == {
        USER: {"paths": ["<HOME>", ("<HOME>/a", 3)], "n": 1.5, "ok": True, "none": None},
        "hosts": ["<host>", ["<host>", {"deep": "<user>@<host>"}]],
    }
    assert obj[USER]["paths"][0] == home, "value() must not mutate its argument"


def test_file_text_and_binary(tmp_path: Path, machine: dict[str, Path], redactor: Redactor) -> None:
    home = str(machine["home"])
    text_file = tmp_path / "out" / "log.txt"
    text_file.parent.mkdir()
    text_file.write_text(f"héllo from {home}/x on {HOST}\n", encoding="utf-8")
    os.chmod(text_file, 0o640)
    binary = tmp_path / "out" / "blob.bin"
    binary.write_bytes(b"\x00\xff\xfeELF" + home.encode() + b"/lib.so\x00\x80" + HOST.encode() + b"\x00")

    assert redactor.file(text_file) is True
    assert text_file.read_text(encoding="utf-8") == "héllo from <HOME>/x on <host>\n"
    assert stat.S_IMODE(text_file.stat().st_mode) == 0o640
    assert redactor.file(binary) is True
    assert binary.read_bytes() == b"\x00\xff\xfeELF<HOME>/lib.so\x00\x80<host>\x00"

    clean = tmp_path / "out" / "clean.txt"
    clean.write_text("nothing to hide\n")
    mtime = clean.stat().st_mtime_ns
    assert redactor.file(clean) is False
    assert clean.stat().st_mtime_ns == mtime
    assert redactor.file(text_file) is False
    assert redactor.file(binary) is False


def test_huge_file_is_skipped(tmp_path: Path, redactor: Redactor) -> None:
    huge = tmp_path / "huge.log"
    with open(huge, "wb") as f:
        f.write(USER.encode())
        # Sparse: the size is past the limit without writing 256 MiB.
        f.truncate(256 * 1024 * 1024 + 1)
    assert redactor.file(huge) is False
    with open(huge, "rb") as f:
        assert f.read(len(USER)) == USER.encode()


def test_tree_counts_changed_files(tmp_path: Path, machine: dict[str, Path], redactor: Redactor) -> None:
    root = tmp_path / "artifacts"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "one.txt").write_text(f"{machine['runs']}/r/attempt-1\n")
    (root / "a" / "b" / "two.json").write_text(f'{{"user": "{USER}"}}')
    (root / "a" / "b" / "three.bin").write_bytes(b"\x00" + str(machine["repo"]).encode())
    (root / "plain.txt").write_text("no secrets\n")
    outside = machine["home"] / "outside.txt"
    outside.write_text(f"{USER} must stay, it is not below root\n")
    (root / "link-to-outside").symlink_to(outside)

    assert redactor.tree(root) == 4  # three files plus the link whose target revealed a path
    assert (root / "a" / "one.txt").read_text() == "<RUNS>/r/attempt-1\n"
    assert (root / "a" / "b" / "two.json").read_text() == '{"user": "<user>"}'
    assert (root / "a" / "b" / "three.bin").read_bytes() == b"\x00<REPO>"
    assert outside.read_text().startswith(USER), "tree() must not follow symlinks"
    assert (root / "link-to-outside").is_symlink()
    assert os.readlink(root / "link-to-outside") == "<HOME>/outside.txt"
    assert redactor.tree(root) == 0


def test_idempotent(machine: dict[str, Path], tmp_path: Path) -> None:
    # Names that collide with the placeholders themselves are the hard case.
    tricky = Redactor.for_machine(
        tmp_path / "runs", tmp_path / "repo", home=machine["home"], user="user", host="host"
    )
    s = f"user on host at {machine['home']}/x <user> <host> <HOME> <RUNS> <REPO>"
    once = tricky.text(s)
    assert once == "<user> on <host> at <HOME>/x <user> <host> <HOME> <RUNS> <REPO>"
    assert tricky.text(once) == once

    plain = Redactor.for_machine(machine["runs"], machine["repo"], home=machine["home"], user=USER, host=HOST)
    s2 = f"{machine['runs']}/a {USER}@{HOST} {machine['repo']}"
    assert plain.text(plain.text(s2)) == plain.text(s2)


def test_resolved_symlink_is_redacted_too(tmp_path: Path, machine: dict[str, Path]) -> None:
    link = tmp_path / "runs-link"
    link.symlink_to(machine["runs"], target_is_directory=True)
    r = Redactor.for_machine(link, machine["repo"], home=tmp_path / "elsewhere", user=USER, host=HOST)
    assert r.text(f"{link}/a and {machine['runs']}/b") == "<RUNS>/a and <RUNS>/b"


def test_defaults_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "envhome"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USER", "zq_env_user")
    monkeypatch.setenv("LOGNAME", "zq_env_user")
    r = Redactor.for_machine(tmp_path / "runs", tmp_path / "repo")
    assert r.text(f"{home}/x zq_env_user") == "<HOME>/x <user>"
    host = socket.gethostname()
    assert r.text(f"on {host} ") == "on <host> "
    assert r.text(f"on {host.split('.')[0]} ") == "on <host> "
