"""A throw-away PostgreSQL server for the store tests, from the machine's own binaries (`initdb`, `pg_ctl`).

`postgres_server()` makes a cluster in a temporary directory, starts it on a free loopback port with trust auth
(run as the `postgres` user when the tests run as root, which PostgreSQL refuses) and removes it afterwards.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator


def find_binary(name: str) -> str | None:
    """`name` on PATH, else in the newest `/usr/lib/postgresql/*/bin`."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return candidates[-1] if candidates else None


def missing_reason() -> str | None:
    """Why no server can be started here, or None."""
    for name in ("initdb", "pg_ctl"):
        if find_binary(name) is None:
            return f"PostgreSQL's {name} was not found (on PATH or in /usr/lib/postgresql/*/bin)"
    if os.geteuid() == 0 and not _run_as_user():
        return "running as root and there is no `postgres` user to run PostgreSQL as"
    return None


def _run_as_user() -> str | None:
    for user in ("postgres", "nobody"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            continue
        return user
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Yields the server's URL, `postgresql://postgres@127.0.0.1:PORT` (connect to a database of your own)."""
    initdb, pg_ctl = find_binary("initdb"), find_binary("pg_ctl")
    assert initdb is not None and pg_ctl is not None
    root = tempfile.mkdtemp(prefix="adapter-critic-pg-")
    data = os.path.join(root, "data")
    prefix: list[str] = []
    if os.geteuid() == 0:
        user = _run_as_user()
        assert user is not None
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
        prefix = ["runuser", "-u", user, "--"]
    port = _free_port()
    initdb_args = [initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"]
    subprocess.run([*prefix, *initdb_args], check=True, stdout=subprocess.DEVNULL)
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off -c full_page_writes=off"
    log = os.path.join(root, "server.log")
    start = [pg_ctl, "-D", data, "-l", log, "-o", options, "-w", "-t", "60", "start"]
    subprocess.run([*prefix, *start], check=True, stdout=subprocess.DEVNULL)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}"
    finally:
        stop = [pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"]
        subprocess.run([*prefix, *stop], check=False, stdout=subprocess.DEVNULL)
        shutil.rmtree(root, ignore_errors=True)


def execute(url: str, statement: str) -> None:
    """Run one SQL statement on the server's database at `url` (`CREATE DATABASE`, a table dropped between tests)."""
    import asyncio

    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())
