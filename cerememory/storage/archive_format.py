"""The CMA archive format: JSON Lines with a header, one line per record, and a SHA-256 footer.

```
{"kind": "header", "format": "cma", "version": "3.0", "counts": {...}, ...}
{"kind": "record", "record": {MemoryRecord}, "fidelity_base": 0.93, "vector": {...}}
{"kind": "raw", "record": {RawJournalRecord}}
{"kind": "footer", "lines": 2, "sha256": "<hex of every byte before this line>"}
```

An encrypted archive is one plaintext preamble line (`{"kind": "encrypted", ...}`) followed by
the sealed chunks of exactly such a plain archive. `parse` checks every line, the counts and the
checksum and returns validated records, so an importer can refuse an archive before it writes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from pydantic import ValidationError

from ..cmp.errors import CMPError, ErrorCode
from ..model import MemoryRecord, RawJournalRecord, StoreType

FORMAT = "cma"
VERSION = "3.0"
SUPPORTED_MAJOR = "3"
MAX_VECTOR_DIM = 65536


def damaged(message: str, reason: str, hint: str | None = None, **details: Any) -> CMPError:
    """The error of every archive that cannot be imported as it is."""
    return CMPError(ErrorCode.IMPORT_CONFLICT, message, details={"reason": reason, **details},
                    hint=hint or "the archive was altered or cut short; export it again")


def dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def _compact_blocks(content: dict[str, Any]) -> None:
    """Text blocks keep their readable `text` and drop the base64 copy of the same bytes."""
    for block in content.get("blocks", ()):
        if "text" in block:
            block.pop("data", None)


# ---------------------------------------------------------------- lines


@dataclass
class ArchivedRecord:
    """One curated record as archived: the record, its decay strength and its stored vector."""

    record: MemoryRecord
    fidelity_base: float
    vector: np.ndarray | None = None
    model: str | None = None


def record_line(item: ArchivedRecord) -> bytes:
    record = item.record.model_dump(mode="json")
    _compact_blocks(record["content"])
    line: dict[str, Any] = {"kind": "record", "record": record, "fidelity_base": item.fidelity_base}
    if item.vector is not None:
        vec = np.ascontiguousarray(item.vector, dtype="<f4")
        line["vector"] = {"model": item.model, "dim": int(vec.shape[0]),
                          "data": base64.b64encode(vec.tobytes()).decode("ascii")}
    return dumps(line)


def raw_line(record: RawJournalRecord) -> bytes:
    data = record.model_dump(mode="json")
    _compact_blocks(data["content"])
    return dumps({"kind": "raw", "record": data})


def header(*, archive_id: str, created_at: str, generator: str, stores: Iterable[StoreType],
           include_raw_journal: bool, counts: dict[str, Any],
           encryption: dict[str, Any] | None) -> dict[str, Any]:
    return {"kind": "header", "format": FORMAT, "version": VERSION, "archive_id": archive_id,
            "created_at": created_at, "generator": generator, "stores": [s.value for s in stores],
            "include_raw_journal": include_raw_journal, "counts": counts,
            "encryption": _public(encryption)}


def _public(encryption: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the inner header repeats of the encryption parameters (not the key check)."""
    if encryption is None:
        return None
    return {k: v for k, v in encryption.items() if k != "key_check"}


def preamble(archive_id: str, encryption: dict[str, Any]) -> bytes:
    return dumps({"kind": "encrypted", "format": FORMAT, "version": VERSION, "archive_id": archive_id,
                  "encryption": encryption})


class Sink(Protocol):
    """Where archive bytes go: a file, a counting wrapper, a sealing stream."""

    def write(self, data: bytes, /) -> int: ...


class HashingWriter:
    """Writes lines to a stream, hashing them, and appends the footer on `finish`."""

    def __init__(self, out: Sink) -> None:
        self._out = out
        self._sha = hashlib.sha256()
        self.lines = 0

    def write(self, line: bytes, *, counted: bool = True) -> None:
        self._sha.update(line)
        self._out.write(line)
        self.lines += counted

    def finish(self) -> str:
        digest = self._sha.hexdigest()
        self._out.write(dumps({"kind": "footer", "lines": self.lines, "sha256": digest}))
        return digest


# ---------------------------------------------------------------- reading


def first_line(data: bytes | memoryview) -> tuple[dict[str, Any], int]:
    """The archive's first JSON line and where the rest starts; refuses what is not a CMA archive."""
    view = memoryview(data)
    end = bytes(view[:65536]).find(b"\n")
    if end < 0:
        if not len(view):
            raise damaged("the archive is empty", "truncated")
        raise damaged("this is not a CMA archive: no header line", "not_an_archive",
                      hint="import a file written by `cerememory export`")
    try:
        line = json.loads(bytes(view[:end]))
    except ValueError:
        raise damaged("this is not a CMA archive: the first line is not JSON", "not_an_archive",
                      hint="import a file written by `cerememory export`") from None
    if not isinstance(line, dict) or line.get("format") != FORMAT:
        raise damaged("this is not a CMA archive: its first line names no cma format", "not_an_archive",
                      hint="import a file written by `cerememory export`")
    version = str(line.get("version", ""))
    if version.split(".")[0] != SUPPORTED_MAJOR:
        raise damaged(f"CMA version {version or '?'} is not supported; this build reads {VERSION}",
                      "version", hint="export the data again with this version of Cerememory",
                      version=version, supported=[VERSION])
    return line, end + 1


@dataclass
class ParsedArchive:
    header: dict[str, Any]
    records: list[ArchivedRecord] = field(default_factory=list)
    raw: list[RawJournalRecord] = field(default_factory=list)
    checksum: str = ""

    @property
    def stores(self) -> list[StoreType]:
        return [StoreType(s) for s in self.header["stores"]]

    @property
    def include_raw_journal(self) -> bool:
        return bool(self.header["include_raw_journal"])


def _vector(line_no: int, value: Any) -> tuple[np.ndarray | None, str | None]:
    if value is None:
        return None, None
    try:
        dim, model = int(value["dim"]), str(value["model"])
        raw = base64.b64decode(value["data"], validate=True)
    except (KeyError, TypeError, ValueError):
        raise damaged(f"line {line_no}: the vector is malformed", "invalid_line", line=line_no) from None
    if not 0 < dim <= MAX_VECTOR_DIM or len(raw) != 4 * dim:
        raise damaged(f"line {line_no}: the vector has {len(raw)} bytes for {dim} dimensions",
                      "invalid_line", line=line_no)
    vec = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not np.all(np.isfinite(vec)):
        raise damaged(f"line {line_no}: the vector is not finite", "invalid_line", line=line_no)
    return vec, model


def _body(line_no: int, raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        raise damaged(f"line {line_no} is not valid JSON", "invalid_line", line=line_no) from None
    if not isinstance(value, dict):
        raise damaged(f"line {line_no} is not a JSON object", "invalid_line", line=line_no)
    return value


def _invalid(line_no: int, exc: ValidationError) -> CMPError:
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return damaged(f"line {line_no}: {where}: {first['msg']}", "invalid_line", line=line_no)


def parse(plain: bytes, *, progress: Any = None) -> ParsedArchive:
    """Check and decode a whole plain archive; raises (importing nothing) on the first problem."""
    head, start = first_line(plain)
    if head.get("kind") != "header":
        raise damaged("the archive's first line is not its header", "invalid_line", line=1)
    if not plain.endswith(b"\n"):
        raise damaged("the archive is truncated: it does not end with its footer", "truncated")
    footer_start = plain.rfind(b"\n", 0, len(plain) - 1) + 1
    if footer_start <= start - 1:
        raise damaged("the archive is truncated: it has no footer", "truncated")
    footer = _body(0, plain[footer_start:])
    if footer.get("kind") != "footer":
        raise damaged("the archive is truncated: its last line is not the footer", "truncated")
    digest = hashlib.sha256(memoryview(plain)[:footer_start]).hexdigest()
    if not isinstance(footer.get("sha256"), str) or not hmac.compare_digest(digest, footer["sha256"]):
        raise damaged("the archive's SHA-256 checksum does not match its content", "checksum")
    try:
        stores = [StoreType(s) for s in head["stores"]]
        counts = head["counts"]
        expected_records, expected_raw = int(counts["records"]), int(counts["raw_journal"])
        include_raw = bool(head["include_raw_journal"])
    except (KeyError, TypeError, ValueError):
        raise damaged("the archive header is incomplete", "invalid_line", line=1) from None

    archive = ParsedArchive(header=head, checksum=digest)
    seen: set[uuid.UUID] = set()
    lines = plain[start:footer_start].split(b"\n")[:-1] if footer_start > start else []
    total = len(lines)
    for n, raw in enumerate(lines, 2):
        body = _body(n, raw)
        kind = body.get("kind")
        try:
            if kind == "record":
                record = MemoryRecord.model_validate(body.get("record"))
                vec, model = _vector(n, body.get("vector"))
                base = float(body.get("fidelity_base", record.fidelity.score))
                if not 0.0 <= base <= 1.0:
                    raise damaged(f"line {n}: fidelity_base is outside 0..1", "invalid_line", line=n)
                if record.store not in stores:
                    raise damaged(f"line {n}: a {record.store.value} record in an archive of "
                                  f"{', '.join(s.value for s in stores)}", "invalid_line", line=n)
                archive.records.append(ArchivedRecord(record, base, vec, model))
                record_id = record.id
            elif kind == "raw" and include_raw:
                raw_record = RawJournalRecord.model_validate(body.get("record"))
                archive.raw.append(raw_record)
                record_id = raw_record.id
            else:
                raise damaged(f"line {n}: unexpected line kind {kind!r}", "invalid_line", line=n)
        except ValidationError as exc:
            raise _invalid(n, exc) from None
        if record_id in seen:
            raise damaged(f"line {n}: record {record_id} appears twice", "invalid_line", line=n)
        seen.add(record_id)
        if progress and n % 1000 == 0:
            progress(n, total)
    if (len(archive.records), len(archive.raw)) != (expected_records, expected_raw) or footer.get("lines") != total:
        raise damaged(f"the archive holds {len(archive.records)} records and {len(archive.raw)} journal "
                      f"records; its header announces {expected_records} and {expected_raw}", "counts")
    return archive
