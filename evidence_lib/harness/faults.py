"""Real faults for the evidence: a lost acknowledgement, a killed session, a dropped queue.

- `LostAckProxy`: a loopback TCP proxy in front of PostgreSQL (a TCP server or the embedded
  server's Unix socket). Armed, it forwards the next COMMIT (a COMMIT alone, or a message whose
  last statement is COMMIT) to the server, waits until the
  server has answered it (ReadyForQuery), drops that answer and closes the client's socket:
  the transaction committed, the client cannot know. The truth is read afterwards from another
  session with `pg_xact_status(xid)`.
- `kill_at_hook`: park a backend at an armed hook point, prove it waits there (pg_locks), and
  `pg_terminate_backend` it: its transaction rolls back, the process is gone.
- `drop_route_queue`: `pgmq.drop_queue` behind the engine's back (a real poison).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pglast
import pglast.parser
from psycopg import conninfo

from evidence_lib.harness.locks import LivenessTimeout, LockWait, dump, waits
from evidence_lib.harness.sessions import HOOK_KEY_SPACE
from evidence_lib.pg.db import Conn


@dataclass
class ProxyEvent:
    at: float
    connection: int
    event: str
    detail: str = ""


@dataclass
class _Link:
    ident: int
    client: socket.socket
    server: socket.socket
    drop: threading.Event = field(default_factory=threading.Event)
    # Each client sync point (the startup packet, a Query, a Sync) is answered by exactly one
    # ReadyForQuery. The armed COMMIT is sync point `commit_index`; server messages before
    # ReadyForQuery number `commit_index - 1` still belong to earlier queries and are forwarded.
    client_syncs: int = 0
    server_ready: int = 0
    commit_index: int = 0
    statements: dict[bytes, bytes] = field(default_factory=dict)


def _message_query(kind: bytes, payload: bytes) -> bytes | None:
    """The SQL text of a simple Query ('Q') or Parse ('P') message, else None."""
    if kind == b"Q":
        return payload.rstrip(b"\x00")
    if kind == b"P":
        name_end = payload.find(b"\x00")
        query_end = payload.find(b"\x00", name_end + 1)
        return payload[name_end + 1 : query_end]
    return None


def _ends_in_commit(query: bytes) -> bool:
    """A COMMIT alone, or a simple query whose last statement is COMMIT (a worker's settlement
    group sends its settlements and COMMIT in one message: the answer to the whole message is the
    answer to the COMMIT). Split with PostgreSQL's own scanner (pglast), so a `;` inside a literal
    is not a statement boundary."""
    try:
        statements = pglast.split(query.decode(errors="replace"), with_parser=False)
    except pglast.parser.ParseError:
        return False
    return bool(statements) and statements[-1].strip().lower() == "commit"


def _bound_statement(payload: bytes) -> bytes:
    """The statement name a Bind message executes (after its portal name)."""
    portal_end = payload.find(b"\x00")
    return payload[portal_end + 1 : payload.find(b"\x00", portal_end + 1)]


class LostAckProxy:
    """Loopback TCP proxy that can lose the reply to one COMMIT (see the module docstring)."""

    def __init__(self, upstream_url: str) -> None:
        params = conninfo.conninfo_to_dict(upstream_url)
        host = str(params.get("host") or "localhost")
        port = int(params.get("port") or 5432)
        if host.startswith("/"):
            self._family, self._address = socket.AF_UNIX, f"{host}/.s.PGSQL.{port}"
        else:
            self._family, self._address = socket.AF_INET, (host, port)  # type: ignore[assignment]
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self.url = conninfo.make_conninfo(
            upstream_url, host="127.0.0.1", port=str(self.port), sslmode="disable", gssencmode="disable"
        )
        self.events: list[ProxyEvent] = []
        self._armed = threading.Event()
        self._done = threading.Event()
        self._closed = False
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="lost-ack-proxy", daemon=True)
        self._thread.start()

    def __enter__(self) -> LostAckProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def arm(self) -> None:
        """Lose the reply to the next COMMIT that any client sends through this proxy."""
        self._done.clear()
        self._armed.set()
        self._event(0, "armed")

    @property
    def fired(self) -> bool:
        return self._done.is_set()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for link in self._links:
                self._shut(link)

    def _event(self, ident: int, event: str, detail: str = "") -> None:
        with self._lock:
            self.events.append(ProxyEvent(time.time(), ident, event, detail))

    def _accept(self) -> None:
        ident = 0
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            ident += 1
            server = socket.socket(self._family, socket.SOCK_STREAM)
            try:
                server.connect(self._address)
            except OSError as exc:
                self._event(ident, "upstream_refused", str(exc))
                client.close()
                continue
            link = _Link(ident, client, server)
            with self._lock:
                self._links.append(link)
            threading.Thread(target=self._client_to_server, args=(link,), daemon=True).start()
            threading.Thread(target=self._server_to_client, args=(link,), daemon=True).start()

    @staticmethod
    def _shut(link: _Link) -> None:
        for sock in (link.client, link.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _client_to_server(self, link: _Link) -> None:
        buffer = b""
        started = False
        try:
            while True:
                chunk = link.client.recv(65536)
                if not chunk:
                    break
                buffer += chunk
                while True:
                    if not started:  # the startup packet: int32 length, no type byte
                        if len(buffer) < 4 or len(buffer) < struct.unpack("!I", buffer[:4])[0]:
                            break
                        size = struct.unpack("!I", buffer[:4])[0]
                        started = True
                        link.client_syncs += 1
                    else:
                        if len(buffer) < 5:
                            break
                        size = 1 + struct.unpack("!I", buffer[1:5])[0]
                        if len(buffer) < size:
                            break
                        kind, payload = buffer[:1], buffer[5:size]
                        if kind in (b"Q", b"S", b"F"):
                            link.client_syncs += 1
                        if kind == b"P":  # remember what each (possibly prepared) statement is
                            name = payload[: payload.find(b"\x00")]
                            link.statements[name] = _message_query(kind, payload) or b""
                        executes = (
                            _message_query(kind, payload)
                            if kind == b"Q"
                            else link.statements.get(_bound_statement(payload))
                            if kind == b"B"
                            else None
                        )
                        if executes is not None and self._armed.is_set() and _ends_in_commit(executes):
                            self._armed.clear()
                            # a Query is its own sync point; a Bind runs at the next Sync
                            link.commit_index = link.client_syncs + (0 if kind == b"Q" else 1)
                            link.drop.set()
                            self._event(link.ident, "commit_forwarded")
                    link.server.sendall(buffer[:size])
                    buffer = buffer[size:]
        except OSError:
            pass
        finally:
            if not link.drop.is_set():
                self._shut(link)

    def _server_to_client(self, link: _Link) -> None:
        buffer = b""
        dropped: list[tuple[bytes, bytes]] = []
        try:
            while True:
                chunk = link.server.recv(65536)
                if not chunk:
                    break
                buffer += chunk
                frames, used = self._split(buffer)
                buffer = buffer[used:]
                forward = b""
                for kind, payload, raw in frames:
                    if link.drop.is_set() and link.server_ready >= link.commit_index - 1:
                        dropped.append((kind, payload))  # the answer to the armed COMMIT
                    else:
                        forward += raw
                    if kind == b"Z":
                        link.server_ready += 1
                if forward:
                    link.client.sendall(forward)
                if link.drop.is_set() and link.server_ready >= link.commit_index:
                    self._event(link.ident, "reply_dropped", ", ".join(self._tag(k, p) for k, p in dropped))
                    self._shut(link)
                    self._event(link.ident, "client_closed")
                    self._done.set()
                    return
        except OSError:
            pass
        finally:
            self._shut(link)

    @staticmethod
    def _split(data: bytes) -> tuple[list[tuple[bytes, bytes, bytes]], int]:
        """Complete server messages at the start of `data` and how many bytes they use."""
        frames, at = [], 0
        while at + 5 <= len(data):
            size = struct.unpack("!I", data[at + 1 : at + 5])[0]
            if at + 1 + size > len(data):
                break
            frames.append((data[at : at + 1], data[at + 5 : at + 1 + size], data[at : at + 1 + size]))
            at += 1 + size
        return frames, at

    @staticmethod
    def _tag(kind: bytes, payload: bytes) -> str:
        if kind == b"C":
            return payload.rstrip(b"\x00").decode(errors="replace")
        if kind == b"Z":
            return f"ReadyForQuery({payload.decode(errors='replace')})"
        return {b"E": "ErrorResponse", b"N": "Notice", b"1": "ParseComplete", b"2": "BindComplete"}.get(
            kind, kind.decode(errors="replace")
        )


def xact_status(conn: Conn, xid: str) -> str | None:
    """The server's truth about a transaction: committed, aborted, in progress (or None)."""
    row = conn.execute("select pg_xact_status(%s::xid8)", (xid,)).fetchone()
    return None if row is None else row[0]


@dataclass(frozen=True)
class Kill:
    pid: int
    application_name: str
    point: str
    proof: list[LockWait]


def wait_for_hooked_backend(
    controller: Conn, application_name: str, point_key: int, timeout: float = 10.0
) -> tuple[int, list[LockWait]]:
    """The pid of the backend named `application_name` that is parked at hook key `point_key`."""
    deadline = time.monotonic() + timeout
    while True:
        pids = [
            r[0]
            for r in controller.execute(
                "select pid from pg_stat_activity where application_name = %s and datname = current_database()",
                (application_name,),
            ).fetchall()
        ]
        for pid in pids:
            found = [
                w
                for w in waits(controller, pid)
                if w.locktype == "advisory" and w.classid == HOOK_KEY_SPACE and w.objid == point_key
            ]
            if found:
                return pid, found
        if time.monotonic() > deadline:
            raise LivenessTimeout(f"no backend {application_name} parked at hook key {point_key}\n" + dump(controller))
        time.sleep(0.002)  # poll interval of an observation


@contextlib.contextmanager
def held_hook(controller: Conn, point: str) -> Iterator[int]:
    """Hold the lock of hook `point` (armed sessions park there) until the block ends.
    Take it before the victim is started, so the victim cannot pass the point first."""
    key_row = controller.execute("select engine._hook_key(%s)", (point,)).fetchone()
    assert key_row is not None
    key = int(key_row[0])
    controller.execute("select pg_advisory_lock(%s, %s)", (HOOK_KEY_SPACE, key))
    try:
        yield key
    finally:
        controller.execute("select pg_advisory_unlock(%s, %s)", (HOOK_KEY_SPACE, key))


def kill_at_hook(controller: Conn, application_name: str, point: str, key: int, *, timeout: float = 10.0) -> Kill:
    """Inside `held_hook(controller, point)`: wait until a backend named `application_name`
    parks at the point (proven in pg_locks) and terminate it; its transaction rolls back."""
    pid, proof = wait_for_hooked_backend(controller, application_name, key, timeout)
    controller.execute("select pg_terminate_backend(%s, 5000)", (pid,))
    return Kill(pid, application_name, point, proof)


def drop_route_queue(conn: Conn, queue_name: str) -> bool:
    """Drop a queue behind the engine's back (its messages go with it)."""
    row = conn.execute("select pgmq.drop_queue(%s)", (queue_name,)).fetchone()
    return bool(row and row[0])


def proxy_summary(proxy: LostAckProxy) -> list[dict[str, Any]]:
    return [{"at": e.at, "connection": e.connection, "event": e.event, "detail": e.detail} for e in proxy.events]
