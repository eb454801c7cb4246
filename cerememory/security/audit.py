"""The tamper-evident audit log: hash-chained JSON lines for every mutating operation (those the
operation table marks `audited`, cmp/operations.py), whatever the entry point: the dispatcher
writes each one's outcome.

Each entry is `{seq, time, op, phase, record_ids, key_id, request_id, transport, summary, prev,
hash}`. An operation writes an `intent` entry just before each change it commits (inside the
database transaction, naming the records it is about to change), then one outcome: `done` when
it returned, `failed` when it raised after an intent. So every committed change has an entry even
when the process is killed between the commit and the outcome: an intent with no outcome after
it names records that may or may not have changed. Entries written before phases existed have
none and are outcomes.
`hash` is the SHA-256 of the entry's canonical JSON without `hash` (keys sorted, no spaces,
UTF-8), and `prev` is the hash of the entry before it (64 zeros for the first). The line on
disk is that canonical JSON with `"hash"` appended last, so a verifier checks a line by hashing
its bytes, without re-serialising. Editing a line breaks its hash; deleting, inserting or
reordering lines breaks the `seq` / `prev` links. Summaries hold counts and enum values only,
never content.

Appends are cheap: one `write(2)` of the lines on an `O_APPEND` descriptor under a thread lock and
an `flock` (the `keys` CLI appends while a server owns the data dir). The flock, once taken, is
kept until the next fsync, so a writer does not make three more system calls per append (take,
read the size, release); another process waits at most one `fsync_interval`. Appends that
arrive while another is being written wait for it and then go in together, as one write (the
outcomes of the writes of one group commit, say), and the intents of a group commit are one
append. `fsync` runs at most once per `fsync_interval` seconds (0: after every append, which
then lets the flock go at once) and on close. A crash loses nothing the OS
has; a power cut can lose the entries of the last interval. A write cut short (a full disk) is
truncated away again, so the chain stays whole.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import Context, ContextVar
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime
from enum import Enum
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Protocol, Union, get_args, get_origin

from pydantic import BaseModel

from ..cmp import context
from ..cmp.errors import CMPError, ErrorCode
from ..model import uuid_texts
from ..storage.full import is_disk_full, storage_full

log = logging.getLogger("cerememory.audit")
AUDIT_FILE = "audit.jsonl"
GENESIS = "0" * 64
_HASH_SUFFIX = len(',"hash":""}') + 64  # bytes after the body's closing brace is removed
INTENT, DONE, FAILED = "intent", "done", "failed"
UNATTRIBUTED = "engine.write"  # the op of an intent written outside any dispatched operation


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def canonical(entry: dict[str, Any]) -> bytes:
    return _CANONICAL.encode(entry).encode("utf-8")


def seal(entry: dict[str, Any]) -> tuple[bytes, str]:
    """The entry's line (canonical JSON with its hash appended) and that hash."""
    body = canonical(entry)
    digest = hashlib.sha256(body).hexdigest()
    return body[:-1] + b',"hash":"' + digest.encode() + b'"}\n', digest


def link(entries: Sequence[dict[str, Any]], seq: int, prev: str) -> list[tuple[dict[str, Any], str, bytes]]:
    """`entries` chained after entry `seq` whose hash is `prev`: each with its `seq` and `prev`,
    its hash and its line."""
    linked = []
    for entry in entries:
        seq += 1
        entry = {"seq": seq, **entry, "prev": prev}
        line, prev = seal(entry)
        linked.append((entry, prev, line))
    return linked


_second: tuple[int, str] = (-1, "")  # the last whole second formatted, and its text


def _now_iso() -> str:
    """The time now in UTC, as `datetime.isoformat(timespec="microseconds")` with a `Z` (each
    entry has one: the date and time of day are formatted once a second)."""
    global _second
    second, fraction = divmod(time.time_ns() // 1000, 1_000_000)
    known = _second
    if known[0] != second:
        known = _second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{known[1]}.{fraction:06d}Z"


# ---------------------------------------------------------------- verification


@dataclass
class Verification:
    """The outcome of checking a log: `first_bad_line` (1-based) names where the chain breaks."""

    path: str
    ok: bool
    entries: int
    head: str  # hash of the last good entry (anchor it elsewhere to detect truncation)
    first_bad_line: int | None = None
    reason: str | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check_line(raw: bytes, seq: int, prev: str) -> tuple[str | None, str]:
    """(why the line is bad or None, its hash)."""
    if not raw.endswith(b"\n"):
        return "the last line is incomplete (a write was cut off or the file truncated)", prev
    line = raw[:-1]
    if len(line) <= _HASH_SUFFIX or not line.endswith(b'"}') or \
            line[-_HASH_SUFFIX:-66] != b',"hash":"':
        return "not an audit entry (no trailing hash)", prev
    given = line[-66:-2].decode("ascii", "replace")
    if hashlib.sha256(line[:-_HASH_SUFFIX] + b"}").hexdigest() != given:
        return "hash mismatch: the entry was edited", prev
    try:
        entry = json.loads(line)
    except ValueError:
        return "not valid JSON", prev
    if not isinstance(entry, dict):
        return "not a JSON object", prev
    if entry.get("seq") != seq:
        return (f"sequence number {entry.get('seq')} where {seq} was expected: "
                "an entry before it was deleted, or entries were reordered or inserted"), prev
    if entry.get("prev") != prev:
        return "the previous-hash link is broken: entries were deleted, reordered or inserted", prev
    return None, given


def verify(path: str | Path) -> Verification:
    """Check every line of the log at `path` (a missing file is an empty, valid log)."""
    path = Path(path)
    if not path.exists():
        return verify_lines([], str(path))
    with path.open("rb") as lines:
        return verify_lines(lines, str(path))


def verify_lines(lines: Iterable[bytes], where: str) -> Verification:
    """Check a log given as its lines, each with its newline (a file's, or a database table's)."""
    started = time.perf_counter()
    seq, head = 0, GENESIS
    for number, raw in enumerate(lines, 1):
        reason, digest = _check_line(raw, seq + 1, head)
        if reason is not None:
            return Verification(where, False, seq, head, number, reason, time.perf_counter() - started)
        seq, head = seq + 1, digest
    return Verification(where, True, seq, head, seconds=time.perf_counter() - started)


def broken(report: Verification) -> CMPError:
    """The error that refuses to open a broken log."""
    return CMPError(
        ErrorCode.AUDIT_BROKEN,
        f"the audit log {report.path} is broken at line {report.first_bad_line}: {report.reason}",
        hint="inspect it with `cerememory audit-verify`; to start anyway (the broken log is "
             "kept aside and the acceptance logged) pass --allow-broken-audit or set "
             "audit.allow_broken",
        details={"path": report.path, "first_bad_line": report.first_bad_line, "reason": report.reason},
    )


def read_entries(lines: Iterable[bytes], *, limit: int, before_seq: int | None = None,
                 op: str | None = None) -> list[dict[str, Any]]:
    """The newest `limit` entries (newest first) with a `seq` below `before_seq`, of operation
    `op` when given; lines that do not parse are skipped (`verify` says where the chain breaks)."""
    found: list[dict[str, Any]] = []
    needle = json.dumps(op).encode() if op is not None else b""  # every entry of `op` holds it verbatim
    for raw in lines:
        if needle not in raw:  # most lines of a filtered read are skipped without parsing them
            continue
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(entry, dict) or (op is not None and entry.get("op") != op):
            continue
        if before_seq is not None and not (isinstance(entry.get("seq"), int) and entry["seq"] < before_seq):
            continue
        found.append(entry)
        if len(found) > limit:
            del found[0]
    found.reverse()
    return found


def _last_line(fd: int, size: int) -> bytes:
    """The last complete line of the file (reading backwards in growing chunks)."""
    chunk = 65536
    while True:
        start = max(0, size - chunk)
        data = os.pread(fd, size - start, start)
        cut = data.rstrip(b"\n").rfind(b"\n")
        if cut >= 0 or start == 0:
            return data[cut + 1:]
        chunk *= 4


# ---------------------------------------------------------------- the log


def _summary_value(value: Any) -> Any:
    """Counts, flags and enum values; None for anything that might carry content."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, list) and value and all(isinstance(v, Enum) for v in value):
        return [v.value for v in value]
    return None


def _may_count(annotation: Any, *, item: bool = False) -> bool:
    """Whether a field so annotated can hold what `_summary_value` keeps (a list item: an enum
    value); False only for types that never do (text, ids, times, models, mappings)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _may_count(get_args(annotation)[0], item=item)
    if origin is Union or origin is UnionType:
        return any(_may_count(arg, item=item) for arg in get_args(annotation) if arg is not NoneType)
    if origin is list:
        return not item and all(_may_count(arg, item=True) for arg in get_args(annotation)[:1])
    if origin is not None:
        return origin is Literal and any(not isinstance(arg, str) for arg in get_args(annotation))
    if isinstance(annotation, type):
        if issubclass(annotation, Enum):
            return True
        if item or issubclass(annotation, _NEVER_COUNTS):
            return False
    return True  # anything else: the value decides


_NEVER_COUNTS = (str, bytes, uuid.UUID, date, BaseModel, dict)


@functools.cache
def _summary_fields(cls: type[BaseModel]) -> tuple[str, ...]:
    """The fields of a model class whose values a summary may keep (the header never)."""
    return tuple(name for name, info in cls.model_fields.items()
                 if name != "header" and _may_count(info.annotation))


def summarize(*models: BaseModel) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for model in models:
        for name in _summary_fields(type(model)):
            value = _summary_value(getattr(model, name, None))
            if value is not None:
                out[name] = value
    return out


_ID_FIELDS = ("record_id", "record_ids", "results")


def _ids_in(value: Any, out: list[uuid.UUID], depth: int = 0) -> list[uuid.UUID]:
    """Collect ids into `out` (a plain recursion: a batch response holds a thousand results)."""
    if isinstance(value, uuid.UUID):
        out.append(value)
    elif isinstance(value, list | tuple) and depth < 3:
        for item in value:
            _ids_in(item, out, depth + 1)
    elif isinstance(value, BaseModel) and depth < 3:
        for name in _id_fields(type(value)):
            found = getattr(value, name)
            if isinstance(found, uuid.UUID):  # the usual field, taken without a call
                out.append(found)
            elif found is not None:
                _ids_in(found, out, depth + 1)
    return out


@functools.cache
def _id_fields(cls: type[BaseModel]) -> tuple[str, ...]:
    """The fields of `_ID_FIELDS` a model class has (a missing attribute costs pydantic a raised error)."""
    return tuple(name for name in _ID_FIELDS if name in cls.model_fields)


def record_ids(request: BaseModel, response: BaseModel | None, touched: Iterable[uuid.UUID] = ()) -> list[str]:
    """The records an operation named or changed: `record_id(s)` of the request and response
    (and of `results[]`), plus what the engine reported through `context.note_records`."""
    ids = _ids_in(response, _ids_in(request, []))
    ids.extend(touched)
    return uuid_texts(list(dict.fromkeys(ids)))


@dataclass
class Running:
    """The audited operation running in this thread or task, and how many intents it wrote."""

    op: str
    intents: int = 0


_running: ContextVar[Running | None] = ContextVar("cerememory_audited_op", default=None)


@contextmanager
def running(op: str) -> Iterator[Running]:
    """Run the body as operation `op`: the intents it writes are named after it, and the
    dispatcher learns whether a failed call had begun changing anything."""
    run = Running(op)
    token = _running.set(run)
    try:
        yield run
    finally:
        _running.reset(token)


class Chain(Protocol):
    """Where the entries of a log live, in order: a file (`FileChain`) or a database table
    (storage/postgres/audit.py). `extend` links and writes entries, in order and adjacent,
    atomically with respect to every other writer of the same chain, so several processes keep
    one chain."""

    where: str

    def extend(self, entries: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]: ...  # adds seq, prev
    def head(self) -> tuple[int, str]: ...
    def lines(self) -> Iterator[bytes]: ...  # every entry's line, oldest first
    def sync(self) -> None: ...
    def close(self) -> None: ...


@dataclass(eq=False)
class _Append:
    """One caller's entries, queued for the next write of a `FileChain`: what they were linked
    as, or the error that kept them out."""

    entries: Sequence[dict[str, Any]]
    linked: list[tuple[dict[str, Any], str]] | None = None
    error: BaseException | None = None


class FileChain:
    """The chain in one file: `extend` is thread- and process-safe (a lock and an flock)."""

    def __init__(self, path: str | Path, *, fsync_interval: float = 1.0, head: tuple[int, str] = (0, GENESIS)) -> None:
        self.path = Path(path)
        self.where = str(self.path)
        self.fsync_interval = fsync_interval
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()  # taken before _lock; close waits for a running fsync
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = -1  # unknown: read the tail before the first append
        self._seq, self._head = head
        self._sync_timer: threading.Timer | None = None
        self._holding = False  # the flock, kept from an append until the next fsync
        self._queued: deque[_Append] = deque()  # appends waiting for the next write
        self._closed = False

    def head(self) -> tuple[int, str]:
        return self._seq, self._head

    def lines(self) -> Iterator[bytes]:
        if self.path.exists():
            with self.path.open("rb") as lines:
                yield from lines

    def _catch_up(self) -> None:
        """Another process appended since our last write: chain from its last entry."""
        size = os.fstat(self._fd).st_size
        if size == self._size:
            return
        if size == 0:
            self._seq, self._head = 0, GENESIS
        else:
            last = _last_line(self._fd, size)
            try:
                entry = json.loads(last)
                self._seq, self._head = int(entry["seq"]), str(entry["hash"])
            except (ValueError, KeyError, TypeError):
                raise CMPError(ErrorCode.AUDIT_BROKEN, f"the last line of {self.path} is not an audit entry",
                               hint="run `cerememory audit-verify`") from None
        self._size = size

    def extend(self, entries: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
        """Queue `entries`, then take the lock: whoever holds it writes every append queued by
        then, so threads arriving together share one write instead of taking turns at it."""
        if not entries:
            return []
        mine = _Append(entries)
        self._queued.append(mine)
        with self._lock:
            if mine.linked is None and mine.error is None:
                self._write_queued()
        if mine.error is not None:
            raise mine.error
        assert mine.linked is not None
        return mine.linked

    def _write_queued(self) -> None:
        """Link and write the appends queued, in order, in one write (the caller holds `_lock`);
        each gets its entries, or the error that kept them all out."""
        group: list[_Append] = []
        while self._queued:
            group.append(self._queued.popleft())
        try:
            if self._closed:
                raise CMPError(ErrorCode.INTERNAL_ERROR, "the audit log is closed")
            linked = self._linked_and_written([entry for append in group for entry in append.entries])
            self._schedule_sync()
        except BaseException as exc:  # noqa: BLE001 - raised by each caller in its own thread
            for append in group:
                append.error = exc
            return
        start = 0
        for append in group:
            end = start + len(append.entries)
            append.linked = [(entry, digest) for entry, digest, _ in linked[start:end]]
            start = end

    def _linked_and_written(self, entries: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], str, bytes]]:
        """Link `entries` after the tail and write them (the caller holds `_lock`), taking the
        flock if it is not held, and reading the tail again then."""
        took = not self._holding
        if took:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            self._holding = True
        try:
            if took:
                self._catch_up()
            linked = link(entries, self._seq, self._head)
            self._write(b"".join(line for _, _, line in linked))
        except BaseException:
            self._let_go()
            raise
        self._seq, self._head = self._seq + len(linked), linked[-1][1]
        return linked

    def _write(self, line: bytes) -> None:
        """Write the whole lines or nothing: a write cut short is truncated away (the caller holds
        the flock, and `_size` is the file's size before it)."""
        try:
            written = os.write(self._fd, line)
            if written != len(line):
                raise OSError(errno.ENOSPC, f"only {written} of {len(line)} bytes were written")
        except OSError:
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                log.exception("could not cut a partial entry off %s", self.path)
                self._size = -1
            raise
        self._size += len(line)

    def _let_go(self) -> None:
        """Release the flock (the caller holds `_lock`): another process may append now."""
        if self._holding:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            self._holding = False

    def _schedule_sync(self) -> None:
        if self.fsync_interval <= 0:
            os.fsync(self._fd)
            self._let_go()
        elif self._sync_timer is None:
            self._sync_timer = threading.Timer(self.fsync_interval, self.sync)
            self._sync_timer.daemon = True
            self._sync_timer.start()

    def sync(self) -> None:
        """fsync outside the append lock, so appends never wait for the disk."""
        with self._sync_lock:
            with self._lock:
                self._sync_timer = None
                if self._closed:
                    return
            try:
                os.fsync(self._fd)
            except OSError:  # the timer's thread has no caller to tell; the next sync retries
                log.exception("fsync of %s failed", self.path)
            with self._lock:
                if not self._closed:
                    self._let_go()

    def close(self) -> None:
        with self._sync_lock, self._lock:
            if self._closed:
                return
            if self._sync_timer is not None:
                self._sync_timer.cancel()
                self._sync_timer = None
            os.fsync(self._fd)
            os.close(self._fd)
            self._closed = True


def _entry(op: str, phase: str, record_ids: Iterable[str], summary: dict[str, Any] | None, key_id: str | None,
           request_id: str | None, transport: str | None) -> dict[str, Any]:
    return {"time": _now_iso(), "op": op, "phase": phase, "record_ids": list(record_ids), "key_id": key_id,
            "request_id": request_id, "transport": transport, "summary": summary or {}}


def _done(op: str, request: BaseModel, response: BaseModel, touched: Iterable[uuid.UUID]) -> dict[str, Any]:
    """The `done` entry of an audited operation that answered in the running context."""
    caller = context.current()
    return _entry(op, DONE, record_ids(request, response, touched), summarize(request, response),
                  caller.key_id, caller.request_id, caller.transport)


def _intent(record_ids: Iterable[uuid.UUID], summary: dict[str, Any] | None) -> tuple[dict[str, Any], Running | None]:
    """The intent entry of a change asked for in the running context, and its running operation."""
    current = _running.get()
    caller = context.current()
    return _entry(current.op if current else UNATTRIBUTED, INTENT, uuid_texts(list(record_ids)), summary,
                  caller.key_id, caller.request_id, caller.transport), current


class AuditLog:
    """An open, verified audit log over a `Chain`; `append` is thread- and process-safe."""

    def __init__(self, path: str | Path | Chain, *, fsync_interval: float = 1.0) -> None:
        self.chain: Chain = FileChain(path, fsync_interval=fsync_interval) \
            if isinstance(path, str | Path) else path
        self.where = self.chain.where

    @classmethod
    def open(cls, data_dir: str | Path, *, allow_broken: bool = False,
             fsync_interval: float = 1.0) -> AuditLog:
        """Verify the data dir's log and open it. A broken chain is refused with AUDIT_BROKEN;
        with `allow_broken` the broken file is kept aside and a new chain starts with an
        `audit.allow_broken` entry that names it."""
        path = Path(data_dir) / AUDIT_FILE
        report = verify(path)
        if report.ok:
            return cls(FileChain(path, fsync_interval=fsync_interval, head=(report.entries, report.head)))
        if not allow_broken:
            raise broken(report)
        aside = path.with_name(f"audit.broken-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}.jsonl")
        os.replace(path, aside)
        log = cls(path, fsync_interval=fsync_interval)
        log.append("audit.allow_broken", transport="server", summary={
            "broken_file": aside.name, "first_bad_line": report.first_bad_line,
            "reason": report.reason, "good_entries": report.entries, "good_head": report.head})
        log.sync()
        return log

    @classmethod
    def over(cls, chain: Any, *, allow_broken: bool = False) -> AuditLog:
        """A log whose chain lives elsewhere (a database table): verified first; a broken one is
        refused with AUDIT_BROKEN unless `allow_broken`, when new entries go on after it."""
        report = chain.verify()
        if not report.ok:
            if not allow_broken:
                raise broken(report)
            log.warning("the audit log %s is broken at entry %s (%s); appending anyway as allowed",
                        report.path, report.first_bad_line, report.reason)
        return cls(chain)

    @property
    def head(self) -> tuple[int, str]:
        """(sequence number, hash) of the last entry this process knows of."""
        return self.chain.head()

    def append(self, op: str, *, record_ids: Iterable[str] = (), summary: dict[str, Any] | None = None,
               key_id: str | None = None, request_id: str | None = None,
               transport: str | None = None, phase: str = DONE) -> dict[str, Any]:
        """Append one entry and return it (with its hash)."""
        return self._linked([_entry(op, phase, record_ids, summary, key_id, request_id, transport)])[0]

    def _linked(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Append `entries` in one write to the chain: each as linked (its `seq` and `prev`),
        with its hash."""
        linked = self.chain.extend(entries)
        for entry, digest in linked:
            entry["hash"] = digest
        return [entry for entry, _ in linked]

    def lines(self) -> Iterator[bytes]:
        return self.chain.lines()

    def verify(self) -> Verification:
        return verify_lines(self.chain.lines(), self.where)

    def sync(self) -> None:
        self.chain.sync()

    def close(self) -> None:
        self.chain.close()

    def intend(self, intents: Sequence[tuple[Context, Iterable[uuid.UUID], dict[str, Any] | None]]) -> None:
        """The intent entries of changes about to be committed, written inside their transaction:
        if this fails, the changes are rolled back, so no change goes unlogged. Each is
        attributed to the context it was asked for in (its operation, key and request id); the
        changes of a group commit go in as one append."""
        made = [within.run(_intent, record_ids, summary) for within, record_ids, summary in intents]
        try:
            self.chain.extend([entry for entry, _ in made])
        except OSError as exc:
            if is_disk_full(exc):
                raise storage_full(Path(self.where)) from exc
            raise CMPError(ErrorCode.INTERNAL_ERROR,
                           f"nothing was changed: its audit entry could not be written: {exc.strerror}",
                           hint=f"check the disk and the permissions of {self.where}") from exc
        for _, current in made:
            if current is not None:
                current.intents += 1

    def record(self, op: str, request: BaseModel, response: BaseModel,
               touched: Iterable[uuid.UUID] = ()) -> dict[str, Any] | None:
        """The `done` entry of one successful audited CMP operation (the dispatcher asks for it when
        the operation's table entry says `audited`), with the caller taken from the call context;
        None when it cannot be written. The change is committed and its intent entry names it, so a
        failure here (a full disk) is left to the server log rather than turned into an error that
        would make the client repeat the change."""
        written = self._outcomes(op, [_done(op, request, response, touched)])
        return written[0] if written else None

    def record_each(self, op: str, outcomes: Sequence[tuple[Context, BaseModel, BaseModel,
                                                             Iterable[uuid.UUID]]]) -> list[dict[str, Any]]:
        """`record` for the calls of a set, each attributed to its own context, in one append:
        one write to the log for the set rather than one for each call."""
        return self._outcomes(op, [within.run(_done, op, request, response, touched)
                                   for within, request, response, touched in outcomes])

    def _outcomes(self, op: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Append `done` entries of `op`, each with its hash; none (logged) when the log cannot
        take them."""
        try:
            return self._linked(entries)
        except (OSError, CMPError):
            log.exception("%s was applied, but its audit outcome could not be written to %s", op, self.where)
            return []

    def record_failure(self, op: str, request: BaseModel, error: BaseException,
                       touched: Iterable[uuid.UUID] = ()) -> None:
        """The `failed` entry of an operation that raised after writing an intent (what it had
        changed by then); best effort, since the caller is already reporting an error."""
        caller = context.current()
        code = error.code.value if isinstance(error, CMPError) else ErrorCode.INTERNAL_ERROR.value
        try:
            self.append(op, phase=FAILED, record_ids=record_ids(request, None, touched),
                        summary={**summarize(request), "error": code}, key_id=caller.key_id,
                        request_id=caller.request_id, transport=caller.transport)
        except (OSError, CMPError):
            log.exception("the failure of %s could not be audited", op)
