"""The `cerememory` command: every subcommand builds one CMP request, runs it through the CMP
dispatcher (in process, or on the server `--server-url` names) and prints the response.

With `--json`, stdout carries only JSON (the CMP response, or `{"error": envelope}`) and
diagnostics go to stderr. Exit codes: 0 success, 1 internal error, 2 bad input,
3 record not found, 4 data directory busy, 5 not implemented, 6 audit log broken, 7 API key refused.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .cmp import build
from .cmp.errors import CMPError, ErrorCode
from .subcommands import OnlyWanted
from .version import __version__
from .wording import count


def escape(text: str) -> str:
    """`text` safe inside a Rich markup string (square brackets printed as they are)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)

EXIT_CODES = {
    ErrorCode.VALIDATION_ERROR: 2, ErrorCode.STORE_INVALID: 2, ErrorCode.CONTENT_TOO_LARGE: 2,
    ErrorCode.MODALITY_UNSUPPORTED: 2, ErrorCode.FORGET_UNCONFIRMED: 2,
    ErrorCode.VERSION_MISMATCH: 2, ErrorCode.RECORD_NOT_FOUND: 3, ErrorCode.DATA_DIR_LOCKED: 4,
    ErrorCode.NOT_IMPLEMENTED: 5, ErrorCode.AUDIT_BROKEN: 6, ErrorCode.IMPORT_CONFLICT: 2,
    ErrorCode.UNAUTHORIZED: 7,
}


def _bad(message: str, hint: str | None = None) -> CMPError:
    return CMPError(ErrorCode.VALIDATION_ERROR, message, hint=hint)


def _json_arg(value: str | None, flag: str) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError as exc:
        raise _bad(f"{flag}: not valid JSON ({exc})", hint=f"quote the JSON for {flag} in single quotes") from None


def _csv(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def _floats(value: str | None, flag: str) -> list[float] | None:
    if value is None:
        return None
    try:
        return [float(v) for v in value.split(",")]
    except ValueError:
        raise _bad(f"{flag}: expected comma-separated numbers") from None


def _when(value: str | None, flag: str) -> str | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise _bad(f"{flag}: expected an ISO 8601 date or time, got {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.isoformat()


def _range(args: argparse.Namespace) -> dict[str, Any] | None:
    """--start / --end as a time range: either may be left out (from the epoch, up to now)."""
    return build.temporal(_when(args.start, "--start"), _when(args.end, "--end"), open_ended=True)


def _text_input(args: argparse.Namespace) -> str:
    """The text of a store command: the argument, `-` for stdin, or --file (must be UTF-8); none,
    or only whitespace, is an error that says what to give."""
    hint = f'cerememory {args.command} "the text", or `-` (or a pipe) for stdin, or --file PATH'
    data: bytes | None
    if getattr(args, "file", None):
        source, data = f"the file {args.file}", Path(args.file).read_bytes()
    elif args.text is None and sys.stdin.isatty():
        raise _bad("give the text to store", hint=hint)
    elif args.text == "-" or args.text is None:
        source, data = "standard input", sys.stdin.buffer.read()
    else:
        source, data = "the text argument", None
    try:
        text = args.text if data is None else data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"content is not valid UTF-8 (byte {exc.start})",
                       hint="convert the file to UTF-8 first") from None
    if not text.strip():
        raise _bad(f"give the text to store: {source} is empty", hint=hint)
    return text


# ---------------------------------------------------------------- commands -> CMP requests


def cmd_store(args: argparse.Namespace) -> tuple[str, dict]:
    return "encode.store", build.drop_none({
        "content": build.text_content(_text_input(args), embedding=_floats(args.embedding, "--embedding"),
                                      summary=args.summary),
        "store": args.store, "emotion": build.emotion(args.emotion, field="--emotion"),
        "metadata": _json_arg(args.metadata_json, "--metadata-json"),
        "meta": _json_arg(args.meta_json, "--meta-json"),
        "created_at": _when(args.created_at, "--created-at"),
    })


def _batch_lines(source: str) -> list[dict]:
    stream = sys.stdin.buffer if source == "-" else Path(source).open("rb")
    records = []
    with stream:
        for number, raw in enumerate(stream, 1):
            if not raw.strip():
                continue
            try:
                line = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as exc:
                raise _bad(f"line {number}: not valid JSON ({exc}); nothing was stored",
                           hint="each line must be one encode.store request, or {\"text\": ...}") from None
            if not isinstance(line, dict):
                raise _bad(f"line {number}: expected a JSON object; nothing was stored")
            if "text" in line and "content" not in line:
                line["content"] = build.text_content(line.pop("text"), embedding=line.pop("embedding", None),
                                                     summary=line.pop("summary", None))
            records.append(line)
    return records


def _refuse_working_in_process(mem: Any, requests: list[dict]) -> None:
    """Working memory lives in the memory of the process holding the data directory, and an
    in-process command exits as soon as it has stored: the record would be gone by the next
    command. Through a server it lives as long as the server does."""
    if not any(r.get("store") == "working" for r in requests):
        return
    from .api import Memory

    if isinstance(mem, Memory):
        raise _bad("the working store lives in the memory of one process, and this command's process ends "
                   "now: the record would be gone by the next command; nothing was stored",
                   hint="start `cerememory serve` (commands then go through it by themselves), or "
                        "choose another --store")


def _embedding_rows(path: str, records: int) -> Any:
    """`--embeddings`: a .npy file of one row per record, as float32."""
    import numpy as np

    hint = "save the vectors with numpy.save(path, matrix), one row per record"
    try:
        rows = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise _bad(f"--embeddings: {path} could not be read as a .npy array ({exc}); nothing was stored",
                   hint=hint) from None
    if rows.ndim != 2 or len(rows) != records or rows.dtype.kind not in "fiu":
        raise _bad(f"--embeddings: {path} holds a {rows.dtype} array of shape {rows.shape}, not {records} rows "
                   "(one per record) of numbers; nothing was stored", hint=hint)
    with np.errstate(over="ignore"):  # a float64 beyond float32's range becomes inf, which CMP refuses
        return rows.astype("<f4")


def _batch_requests(records: list[dict], rows: Any, infer: bool) -> list[dict]:
    """The encode.batch requests that store `records` (with `rows`, their vectors, when given)."""
    from .cmp.messages import MAX_BATCH, row_length
    from .model import base64_text

    requests = []
    for start in range(0, len(records), MAX_BATCH):
        request: dict[str, Any] = {"records": records[start:start + MAX_BATCH], "infer_associations": infer}
        if rows is not None:  # base64, as JSON carries it: the same request embedded or through a server
            matrix = rows[start:start + MAX_BATCH]
            request["embeddings_f32"] = base64_text(matrix.tobytes())
            request["embedding_dim"] = row_length(matrix)
        requests.append(request)
    return requests


def run_batch(mem: Any, args: argparse.Namespace, out: Output) -> dict:
    from .cmp.dispatch import parse_request
    from .cmp.messages import MAX_BATCH

    records = _batch_lines(args.source)
    if not records:
        raise _bad("no records in the input")
    _refuse_working_in_process(mem, records)
    rows = _embedding_rows(args.embeddings, len(records)) if args.embeddings else None
    requests = _batch_requests(records, rows, args.infer_associations)
    for n, request in enumerate(requests):  # validate everything before storing anything
        try:
            parse_request("encode.batch", request)
        except CMPError as exc:
            exc.message = f"chunk starting at record {n * MAX_BATCH + 1}: {exc.message}"
            raise
    results: list[dict] = []
    inferred = 0
    with out.progress("storing", len(records)) as advance:
        for request in requests:
            response = mem.dispatch("encode.batch", request)
            results.extend(response["results"])
            inferred += response["associations_inferred"]
            advance(len(request["records"]))
    return {"results": results, "associations_inferred": inferred}


def cmd_recall(args: argparse.Namespace) -> tuple[str, dict]:
    cue = build.drop_none({"text": args.query, "embedding": _floats(args.embedding, "--embedding"),
                           "temporal": _range(args)})
    return "recall.query", build.drop_none({
        "cue": cue, "limit": args.limit, "stores": _csv(args.stores), "recall_mode": args.mode,
        "min_fidelity": args.min_fidelity, "include_decayed": args.include_decayed or None,
        "reconsolidate": not args.no_reconsolidate,
    })


def cmd_raw_store(args: argparse.Namespace) -> tuple[str, dict]:
    return "encode.store_raw", build.drop_none({
        "session_id": args.session_id, "content": build.text_content(_text_input(args)),
        "turn_id": args.turn_id, "topic_id": args.topic_id, "source": args.source,
        "speaker": args.speaker, "visibility": args.visibility, "secrecy_level": args.secrecy_level,
        "metadata": _json_arg(args.metadata_json, "--metadata-json"),
        "meta": _json_arg(args.meta_json, "--meta-json"),
    })


def cmd_raw_recall(args: argparse.Namespace) -> tuple[str, dict]:
    return "recall.raw_query", build.drop_none({
        "query": args.query, "session_id": args.session_id, "limit": args.limit,
        "record_ids": _csv(args.ids), "secrecy_levels": _csv(args.secrecy_levels),
        "include_private_scratch": args.include_private_scratch or None,
        "include_sealed": args.include_sealed or None, "temporal": _range(args),
    })


def cmd_timeline(args: argparse.Namespace) -> tuple[str, dict]:
    now = datetime.now(UTC)
    return "recall.timeline", build.drop_none({
        "range": build.temporal(_when(args.start, "--start") or (now - timedelta(days=7)).isoformat(),
                                _when(args.end, "--end") or now.isoformat()),
        "granularity": args.granularity, "min_fidelity": args.min_fidelity,
        "stores": _csv(args.stores),
    })


def cmd_graph(args: argparse.Namespace) -> tuple[str, dict]:
    return "recall.graph", build.drop_none({"center_id": args.center, "depth": args.depth,
                                            "limit_nodes": args.limit_nodes,
                                            "include_meta": args.include_meta or None})


def cmd_associate(args: argparse.Namespace) -> tuple[str, dict]:
    return "recall.associate", build.drop_none({"record_id": args.record_id, "depth": args.depth,
                                                "min_weight": args.min_weight, "limit": args.limit,
                                                "association_types": _csv(args.types)})


def cmd_inspect(args: argparse.Namespace) -> tuple[str, dict]:
    return "introspect.record", {"record_id": args.record_id}


def cmd_forget(args: argparse.Namespace) -> tuple[str, dict]:
    return "lifecycle.forget", build.drop_none({
        "record_ids": args.record_ids or None, "store": args.store, "cascade": args.cascade or None,
        "confirm": args.confirm, "temporal_range": _range(args)})


def cmd_mode(args: argparse.Namespace) -> tuple[str, dict]:
    return "lifecycle.set_mode", build.drop_none({"mode": args.mode, "scope": _csv(args.scope)})


def cmd_stats(args: argparse.Namespace) -> tuple[str, dict]:
    return "introspect.stats", {}


def cmd_decay_tick(args: argparse.Namespace) -> tuple[str, dict]:
    return "lifecycle.decay_tick", {}


def cmd_consolidate(args: argparse.Namespace) -> tuple[str, dict]:
    return "lifecycle.consolidate", {"strategy": args.strategy, "min_age_hours": args.min_age_hours,
                                     "min_access_count": args.min_access_count, "dry_run": args.dry_run}


def cmd_evolution(args: argparse.Namespace) -> tuple[str, dict]:
    return "introspect.evolution", {}


def cmd_archive(args: argparse.Namespace) -> tuple[str, dict, Path]:
    from .cli_archive import prepare

    return prepare(args)


def cmd_forecast(args: argparse.Namespace) -> tuple[str, dict]:
    at = _when(args.at, "--at") or (datetime.now(UTC) + timedelta(days=30)).isoformat()
    return "introspect.decay_forecast", {"record_ids": args.record_ids, "forecast_at": at}


# ---------------------------------------------------------------- output


class Output:
    """JSON on stdout for machines, rich tables for people; diagnostics always on stderr."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def console(self, stderr: bool = False) -> Any:
        """A console that prints text as it is: stored memories, hints such as `pip install
        '…[embed]'` and graph edges would otherwise be eaten as Rich markup. Styled lines pass
        markup=True and escape what they interpolate."""
        from rich.console import Console

        return Console(stderr=stderr, highlight=False, soft_wrap=False, markup=False)

    def json(self, value: Any) -> None:
        sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")

    def error(self, exc: CMPError) -> None:
        if self.as_json:
            self.json({"error": exc.envelope()})
            return
        console = self.console(stderr=True)
        console.print(f"[bold red]error[/] [red]{exc.code.value}[/]: {escape(exc.message)}", markup=True)
        if exc.hint:
            console.print(f"[dim]hint:[/] {escape(exc.hint)}", markup=True)

    def note(self, text: str) -> None:
        """A dim line on stderr for people (nothing under --json)."""
        if not self.as_json:
            from .plaintable import styled

            sys.stderr.write(styled(text, "dim", sys.stderr) + "\n")

    def progress(self, label: str, total: int | None) -> Any:
        from contextlib import contextmanager

        @contextmanager
        def bar():
            from rich.progress import Progress

            with Progress(console=self.console(stderr=True), transient=True) as progress:
                task = progress.add_task(label, total=total)
                yield lambda n: progress.advance(task, n)

        return bar()

    def render(self, op: str, result: dict) -> None:
        if self.as_json:
            self.json(result)
            return
        plain = PLAIN_RENDERERS.get(op)
        if plain is not None:
            sys.stdout.write(plain(result, sys.stdout))
            return
        renderer = RENDERERS.get(op)
        if renderer is None:
            self.console().print_json(json.dumps(result, default=str))
        else:
            renderer(self.console(), result)


def _short(text: str, width: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _block_text(content: dict) -> str:
    import base64

    parts = []
    for block in content.get("blocks", []):
        if "text" in block:
            parts.append(block["text"])
        elif block.get("modality") == "text":
            parts.append(base64.b64decode(block["data"]).decode("utf-8", "replace"))
        else:
            parts.append(f"<{block.get('modality')} {block.get('format')}>")
    return " ".join(parts) or content.get("summary") or ""


def _render_memories(result: dict, stream: Any) -> str:
    """Recalled memories as a table (plain text: this is the output of the quickest commands)."""
    from .plaintable import Column, render, styled

    memories = result.get("memories", [])
    columns = [Column(name, fold=name == "content")
               for name in ("#", "score", "store", "fidelity", "created", "id", "content")]
    rows = [[str(n), f"{hit['relevance_score']:.3f}", hit["record"]["store"],
             f"{hit['record']['fidelity']['score']:.2f}", hit["record"]["created_at"][:19], hit["record"]["id"],
             _short(_block_text(hit["rendered_content"]))] for n, hit in enumerate(memories, 1)]
    text = render(columns, rows, title=f"{len(memories)} of {result.get('total_candidates', len(memories))} memories",
                  stream=stream)
    meta = result.get("query_metadata")
    if meta:
        signals = ", ".join(meta.get("signals", [])) or "none"
        note = f"signals: {signals}"
        if meta.get("semantic_off_reason"):
            note += f" — {meta['semantic_off_reason']}"
        text += styled(note, "dim", stream) + "\n"
    return text


def _render_raw(console: Any, result: dict) -> None:
    from rich.table import Table

    table = Table(title=f"{len(result['records'])} of {result['total_candidates']} journal records")
    for column in ("created", "session", "speaker", "source", "id", "text"):
        table.add_column(column, overflow="fold" if column == "text" else "ellipsis")
    for r in result["records"]:
        table.add_row(r["created_at"][:19], r["session_id"], r["speaker"], r["source"], r["id"],
                      _short(_block_text(r["content"])))
    console.print(table)


def _render_stats(console: Any, result: dict) -> None:
    from rich.table import Table

    table = Table(title="Cerememory", show_header=False)
    table.add_column("key")
    table.add_column("value")
    for store, held in result["records_by_store"].items():
        fidelity = f"{result['avg_fidelity_by_store'][store]:.2f}" if held else "—"  # no records: no average
        table.add_row(f"{store} records", f"{held} (avg fidelity {fidelity})")
    for key in ("total_records", "total_associations", "total_recall_count", "raw_journal_records",
                "raw_journal_pending_dream", "vector_index_records", "embedder", "semantic_off_reason",
                "recall_mode", "oldest_record", "newest_record", "dream_episodic_summaries",
                "dream_semantic_nodes", "last_dream_tick_at", "background_dream_enabled", "data_dir"):
        if result.get(key) is not None:
            table.add_row(key.replace("_", " "), str(result[key]))
    if commits := result.get("write_commits"):  # since this process opened the data dir: a server's
        table.add_row("writes committed", f"{result['writes_committed']} in {commits} commits "
                                          f"({result['writes_committed'] / commits:.1f} a commit)")
    console.print(table)


def _render_timeline(console: Any, result: dict) -> None:
    for bucket in result["buckets"]:
        console.print(f"[bold]{escape(bucket['start'][:16])}[/]  {bucket['count']} memories", markup=True)
        for hit in bucket["memories"]:
            console.print(f"  {hit['record']['store']:<10} {_short(_block_text(hit['rendered_content']), 80)}")
    if not result["buckets"]:
        console.print("no memories in that range")


def _render_graph(console: Any, result: dict) -> None:
    for node in result["nodes"]:
        console.print(f"[bold]{escape(node['id'])}[/] {node['store']} {node['fidelity']:.2f} "
                      f"{escape(_short(node.get('summary') or '', 60))}", markup=True)
    for edge in result["edges"]:
        console.print(f"  {edge['source']} -[{edge['edge_type']} {edge['weight']:.2f}]-> {edge['target']}")


def _render_consolidation(console: Any, result: dict) -> None:
    verb = "would" if result["dry_run"] else "did"
    console.print(f"{result['strategy']} consolidation {verb}: {count(result['records_processed'], 'episodic record')} "
                  f"in scope, {count(result['records_compressed'], 'duplicate')} merged, "
                  f"{result['records_migrated']} promoted to semantic facts")
    for merge in result["merges"]:
        console.print(f"  merge {merge['dropped_id']} -> {merge['kept_id']} (cosine {merge['similarity']:.3f})")
    for promotion in result["promotions"]:
        console.print(f"  promote {promotion['episodic_id']}: {_short(promotion['summary'], 70)}")


def _render_evolution(console: Any, result: dict) -> None:
    from rich.table import Table

    adjustments = result["parameter_adjustments"]
    if not adjustments:
        console.print("no decay parameter has been adjusted")
    else:
        table = Table(title="decay parameters adjusted by the evolution engine")
        for column in ("store", "parameter", "configured", "current", "reason"):
            table.add_column(column, overflow="fold" if column == "reason" else "ellipsis")
        for a in adjustments:
            table.add_row(a["store"], a["parameter"], f"{a['original_value']:.4g}", f"{a['current_value']:.4g}",
                          a["reason"])
        console.print(table)
    for pattern in result["detected_patterns"]:
        console.print(f"[dim]observed:[/] {escape(pattern)}", markup=True)


def _dream_render(console: Any, result: dict) -> None:
    from .dream.cli import render

    render(console, result)


def _ingest_render(console: Any, result: dict) -> None:
    from .ingest.cli import render

    render(console, result)


def _left_out(ids: list[str] | None) -> str:
    """What an export left out: records that cannot be decoded (the log names why)."""
    if not ids:
        return ""
    return f"; left out {len(ids)} undecodable record(s): {', '.join(ids)}"


def _render_ok(message: Callable[[dict], str]) -> Callable[[Any, dict], None]:
    return lambda console, result: console.print(message(result))


# Renderers that return text without rich (the result and the stream it goes to).
PLAIN_RENDERERS: dict[str, Callable[[dict, Any], str]] = {
    "recall.query": _render_memories,
    "recall.associate": _render_memories,
}
RENDERERS: dict[str, Callable[[Any, dict], None]] = {
    "recall.raw_query": _render_raw,
    "recall.timeline": _render_timeline,
    "recall.graph": _render_graph,
    "introspect.stats": _render_stats,
    "lifecycle.dream_tick": _dream_render,
    "ingest": _ingest_render,
    "introspect.evolution": _render_evolution,
    "lifecycle.consolidate": _render_consolidation,
    "encode.store": _render_ok(lambda r: f"stored {r['record_id']} in {r['store']}"),
    "encode.store_raw": _render_ok(lambda r: f"journaled {r['record_id']} in session {r['session_id']}"),
    "encode.batch": _render_ok(lambda r: f"stored {count(len(r['results']), 'record')}"
                               f" ({count(r['associations_inferred'], 'association')} inferred)"),
    "lifecycle.forget": _render_ok(lambda r: f"forgot {count(r['records_deleted'], 'record')}"),
    "lifecycle.set_mode": _render_ok(lambda r: "recall mode set"),
    "lifecycle.export": _render_ok(lambda r: f"exported {count(r['record_count'], 'record')} and "
                                   f"{count(r['raw_record_count'], 'journal record')} to {r['path']} "
                                   f"({count(r['size_bytes'], 'byte')}, sha256 {r['checksum']})"
                                   + _left_out(r.get("undecodable_ids"))),
    "lifecycle.import": _render_ok(lambda r: f"imported {count(r['records_imported'], 'record')} and "
                                   f"{count(r['raw_records_imported'], 'journal record')} from {r['path']}; "
                                   f"{r['records_skipped']} kept as stored"),
    "lifecycle.decay_tick": _render_ok(lambda r: f"updated {count(r['records_updated'], 'record')}; "
                                       f"{r['records_below_threshold']} below their prune threshold "
                                       f"({r['records_forgotten']} newly forgotten)"),
}


# ---------------------------------------------------------------- parser


def _common(parser: argparse.ArgumentParser, *, remote: bool = True) -> None:
    parser.add_argument("--data-dir", help="data directory (env CEREMEMORY_DATA_DIR; default ~/.cerememory/data)")
    if remote:
        parser.add_argument("--server-url", help="talk to a running `cerememory serve` (env CEREMEMORY_SERVER_URL)")
        parser.add_argument("--api-key", help="bearer key for --server-url (env CEREMEMORY_SERVER_API_KEY)")
        parser.add_argument("--insecure", action="store_true",
                            help="allow sending the API key over plain http:// to another machine")
    parser.add_argument("--config", help="config file (env CEREMEMORY_CONFIG; default ~/.cerememory/config.toml)")
    parser.add_argument("--json", action="store_true", help="print JSON only on stdout")


STORES = ["episodic", "semantic", "procedural", "emotional", "working"]


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter, sized without `shutil` (argparse makes one per argument it adds, and
    importing shutil for the terminal size costs a short command more than its parser)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        if width is None:
            from .plaintable import width_of

            width = width_of(sys.stdout) - 2
        super().__init__(prog, indent_increment, max_help_position, width)


class _Parser(argparse.ArgumentParser):
    """Usage mistakes become CMP errors, so `--json` callers get an envelope too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"{self.prog}: {message}",
                       hint=f"run `{self.prog} --help` for the usage")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with `command` only that command's: a short client call would
    otherwise spend more time building thirty parsers than running its own. An unknown
    `command` builds them all, so the error lists every command."""
    parser = _Parser(prog="cerememory", description="A living memory database for LLM agents.")
    parser.add_argument("--version", action="version", version=f"cerememory {__version__}")
    sub = OnlyWanted(parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                             parser_class=_Parser), command)

    def add(name: str, help_text: str, handler: Any) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        _common(p)
        p.set_defaults(handler=handler)
        return p

    p = add("store", "Store one memory.", cmd_store)
    p.add_argument("text", nargs="?", help="the text to remember, or - for stdin")
    p.add_argument("--file", help="read the text from a file (UTF-8)")
    p.add_argument("--store", choices=STORES, help="target store (default: semantic if --summary, else episodic)")
    p.add_argument("--emotion", help="a Plutchik label: joy, trust, fear, surprise, sadness, ...")
    p.add_argument("--summary", help="a one-line summary (routes to semantic unless --store is given)")
    p.add_argument("--embedding", help="comma-separated floats to use as the embedding")
    p.add_argument("--metadata-json", help="metadata as a JSON object")
    p.add_argument("--meta-json", help="meta-memory (intent, rationale, ...) as a JSON object")
    p.add_argument("--created-at", help="when it happened (ISO 8601; default now)")

    p = add("batch", "Store many memories from JSON Lines (a file or - for stdin).", None)
    p.add_argument("source", help="JSONL file, one encode.store request (or {\"text\": ...}) per line; - for stdin")
    p.add_argument("--infer-associations", action="store_true", help="link consecutive records")
    p.add_argument("--embeddings", metavar="FILE.npy",
                   help="the records' vectors: a numpy .npy matrix, row i for the i-th record (sent as one "
                        "matrix per batch)")

    p = add("recall", "Recall memories by a text cue (no cue: the most recent).", cmd_recall)
    p.add_argument("query", nargs="?", help="what to recall")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--stores", help="comma-separated stores to search")
    p.add_argument("--mode", choices=["human", "perfect"], default="human")
    p.add_argument("--min-fidelity", type=float)
    p.add_argument("--include-decayed", action="store_true")
    p.add_argument("--no-reconsolidate", action="store_true", help="do not count this as an access")
    p.add_argument("--embedding", help="comma-separated floats to search by")
    p.add_argument("--start", help="only memories created at or after (ISO 8601)")
    p.add_argument("--end", help="only memories created at or before (ISO 8601)")

    p = add("raw-store", "Append verbatim text to the raw journal.", cmd_raw_store)
    p.add_argument("text", nargs="?", help="the text, or - for stdin")
    p.add_argument("--file", help="read the text from a file (UTF-8)")
    p.add_argument("--session-id", required=True)
    p.add_argument("--turn-id")
    p.add_argument("--topic-id")
    p.add_argument("--source", choices=["conversation", "tool_io", "scratchpad", "summary", "imported"])
    p.add_argument("--speaker", choices=["user", "assistant", "system", "tool"])
    p.add_argument("--visibility", choices=["normal", "private_scratch", "sealed"])
    p.add_argument("--secrecy-level", choices=["public", "sensitive", "secret"])
    p.add_argument("--metadata-json")
    p.add_argument("--meta-json")

    p = add("raw-recall", "Search the raw journal.", cmd_raw_recall)
    p.add_argument("query", nargs="?")
    p.add_argument("--session-id")
    p.add_argument("--ids", help="comma-separated raw record ids")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--include-private-scratch", action="store_true")
    p.add_argument("--include-sealed", action="store_true")
    p.add_argument("--secrecy-levels", help="comma-separated: public,sensitive,secret")
    p.add_argument("--start")
    p.add_argument("--end")

    p = add("timeline", "Memories of a time range in buckets (default: the last 7 days).", cmd_timeline)
    p.add_argument("--start")
    p.add_argument("--end")
    p.add_argument("--granularity", choices=["minute", "hour", "day", "week", "month"], default="hour")
    p.add_argument("--min-fidelity", type=float)
    p.add_argument("--stores")

    p = add("graph", "The association graph around a record (or the best connected).", cmd_graph)
    p.add_argument("center", nargs="?")
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--limit-nodes", type=int, default=10)
    p.add_argument("--include-meta", action="store_true")

    p = add("associate", "Spread activation from a record.", cmd_associate)
    p.add_argument("record_id")
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--min-weight", type=float, default=0.1)
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--types", help="comma-separated association types to follow (default: all)")

    p = add("inspect", "Everything stored about one record.", cmd_inspect)
    p.add_argument("record_id")

    p = add("forget", "Delete records permanently (needs --confirm).", cmd_forget)
    p.add_argument("record_ids", nargs="*")
    p.add_argument("--store", choices=STORES, help="forget a whole store")
    p.add_argument("--start")
    p.add_argument("--end")
    p.add_argument("--cascade", action="store_true", help="also forget directly associated records")
    p.add_argument("--confirm", action="store_true")

    p = add("mode", "Set the recall mode (human fades with fidelity, perfect is verbatim).", cmd_mode)
    p.add_argument("mode", choices=["human", "perfect"])
    p.add_argument("--scope", help="comma-separated stores (default: all)")

    add("stats", "Counts, fidelity and index figures.", cmd_stats)
    add("decay-tick", "Materialise fidelity now and count forgotten records.", cmd_decay_tick)
    if command in (None, "dream-tick"):
        from .dream import cli as dream_cli

        dream_cli.add_arguments(add("dream-tick", "Summarise unprocessed raw journal topics into episodic memories "
                                    "and semantic facts.", None))
    if command in (None, "ingest"):
        from .ingest import cli as ingest_cli

        ingest_cli.add_arguments(add("ingest", "Ingest agent sessions (Claude Code, Codex, Gemini, Cursor, Aider, "
                                     "Pi) into the raw journal, secrets redacted; reruns add only new turns.", None))
    p = add("forecast", "Fidelity of records at a future instant, and when each will be forgotten.", cmd_forecast)
    p.add_argument("record_ids", nargs="+")
    p.add_argument("--at", help="the instant to forecast (ISO 8601; default: in 30 days)")
    p = add("consolidate", "Merge near-duplicate episodic memories and promote them to semantic facts.",
            cmd_consolidate)
    p.add_argument("--strategy", choices=["full", "incremental", "selective"], default="incremental",
                   help="full: everything; incremental: what changed since the last run; selective: salient only")
    p.add_argument("--min-age-hours", type=float, default=0.0, help="promote only memories at least this old")
    p.add_argument("--min-access-count", type=int, default=0, help="promote only memories recalled this often")
    p.add_argument("--dry-run", action="store_true", help="report the plan, change nothing")
    add("evolution", "Decay parameters the evolution engine adjusted, and the patterns it observed.", cmd_evolution)
    p = add("reindex", "Rebuild the full-text indexes from the database.", None)
    p.add_argument("--target", choices=["all", "records", "journal"], default="all",
                   help="which index: the curated records', the raw journal's, or both (default)")
    p = sub.add_parser("init", help="Create a data directory, optionally encrypted at rest.",
                       description="Create a data directory, optionally encrypted at rest. The passphrase "
                                   "comes from CEREMEMORY_PASSPHRASE or a prompt.")
    _common(p, remote=False)
    p.add_argument("--encrypt", action="store_true", help="seal every record with its own key (Argon2id + "
                   "ChaCha20-Poly1305); forget becomes a cryptographic erase")
    p = sub.add_parser("rekey", help="Change the passphrase of an encrypted data directory.",
                       description="Change the passphrase of an encrypted data directory without re-encrypting "
                                   "records. Old passphrase: CEREMEMORY_PASSPHRASE or a prompt; new: "
                                   "CEREMEMORY_NEW_PASSPHRASE or a prompt.")
    _common(p, remote=False)

    p = add("export", "Write a CMA archive of the stores to a new file (never overwritten).", cmd_archive)
    p.add_argument("path", help="the new archive file (no '..' components, no symbolic links)")
    p.add_argument("--stores", help="comma-separated stores (default: all five)")
    p.add_argument("--raw", action="store_true", help="include the raw journal")
    p.add_argument("--encrypt", action="store_true",
                   help="encrypt with a passphrase (env CEREMEMORY_ARCHIVE_PASSPHRASE, else a prompt)")
    p = add("import", "Read a CMA archive into the stores (all or nothing).", cmd_archive)
    p.add_argument("path", help="the archive file (an encrypted one asks for its passphrase, or reads "
                                "CEREMEMORY_ARCHIVE_PASSPHRASE)")
    p.add_argument("--strategy", choices=["merge", "replace"], default="merge",
                   help="merge into what is stored, or replace the archive's stores (default merge)")
    p.add_argument("--conflict", choices=["keep_existing", "keep_imported", "keep_newer"], default="keep_newer",
                   help="when a record exists in both (default keep_newer, by updated_at)")

    p = sub.add_parser("serve", help="Serve CMP over HTTP (and gRPC) from one process that owns the data dir.",
                       description="Serve CMP over HTTP (and gRPC) from one process that owns the data dir.")
    _common(p, remote=False)
    p.add_argument("--host", help="address to bind (default 127.0.0.1; env CEREMEMORY_HTTP__HOST)")
    p.add_argument("--port", type=int, help="HTTP port (default 8420; env CEREMEMORY_HTTP__PORT)")
    p.add_argument("--grpc-port", type=int, help="gRPC port (off by default; env CEREMEMORY_GRPC__PORT)")
    p.add_argument("--tls-cert", help="PEM certificate chain for gRPC (env CEREMEMORY_GRPC__TLS_CERT)")
    p.add_argument("--tls-key", help="PEM private key for gRPC (env CEREMEMORY_GRPC__TLS_KEY)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--log-format", choices=["text", "json"],
                   help="stderr log lines: text, or one JSON object per line (env CEREMEMORY_LOG__FORMAT)")
    p.add_argument("--allow-broken-audit", action="store_true", default=None,
                   help="start although the audit chain is broken (the broken log is kept aside and "
                        "this is logged; env CEREMEMORY_AUDIT__ALLOW_BROKEN)")
    p.set_defaults(handler=None)

    p = sub.add_parser("mcp", help="A stdio MCP server that proxies to a running `cerememory serve`.",
                       description="A stdio MCP server that proxies to a running `cerememory serve`. "
                                   "Only MCP protocol traffic goes to stdout; logs go to stderr.")
    p.add_argument("--server-url", help="the server to proxy to (env CEREMEMORY_SERVER_URL; "
                                        "default http://127.0.0.1:8420)")
    p.add_argument("--api-key", help="bearer key for the server (env CEREMEMORY_SERVER_API_KEY)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per request to the server (default 30)")
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--data-dir", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)

    p = sub.add_parser("config", help="Show the effective configuration.")
    config_sub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True,
                                  parser_class=_Parser)
    show = config_sub.add_parser("show", help="Every setting, its value and where it came from.")
    _common(show, remote=False)

    if command in (None, "keys", "audit-verify"):
        from .security import cli as security_cli

        security_cli.add_parsers(sub, _common, _Parser)
    if command in (None, "migrate-schema"):
        from .storage import cli as storage_cli

        storage_cli.add_parsers(sub, _common)
    if command in (None, "migrate"):
        from . import cli_migrate

        cli_migrate.add_parser(sub, _common)
    return parser if sub.built or command is None else build_parser()


# ---------------------------------------------------------------- main


def _load_config(args: argparse.Namespace, **flags: Any) -> Any:
    from .config import load_config

    return load_config(args.config, {"data_dir": args.data_dir, "server_url": getattr(args, "server_url", None),
                                     "server_api_key": getattr(args, "api_key", None), **flags})


# Commands that call typed `MemoryAPI` methods; every other command only dispatches, so against a
# server it runs on the standard-library client and never imports httpx, pydantic or the engine.
TYPED_COMMANDS = frozenset({"ingest", "reindex", "export", "import"})


def _open(args: argparse.Namespace, out: Output, stack: ExitStack) -> Any:
    """The server `--server-url` names; else the running server that owns the data directory (its
    lock file names its URL; asked first, so a client command never loads the engine); else the
    data directory in this process, its calls bound to the CLI's call context on `stack` (the
    audit log names the transport; a server binds its own)."""
    config = _load_config(args)
    key, plain = config["server_api_key"], args.command not in TYPED_COMMANDS
    if config["server_url"]:
        return _client(config["server_url"], key, plain, insecure=getattr(args, "insecure", False))
    from .storage.lock import owning_server

    owner = owning_server(config.data_dir)
    client = _answering(owner, key, plain) if owner else None
    if client is None:
        from .api import open_config
        from .cmp.context import bound

        stack.enter_context(bound(transport="cli"))
        try:
            mem = open_config(config)
        except CMPError as exc:  # a server took the directory since we asked: go through it
            owner = (exc.details or {}).get("server_url") if exc.code is ErrorCode.DATA_DIR_LOCKED else None
            client = _answering(owner, key, plain) if owner else None
            if client is None:
                raise
        else:
            return _in_process(mem, out)
    out.note(f"using the server that owns {config.data_dir}: {owner}")
    return client


def _in_process(mem: Any, out: Output) -> Any:
    if mem.engine.repaired and not out.as_json:
        out.console(stderr=True).print(f"[dim]rebuilt stale index: {escape(', '.join(mem.engine.repaired))}[/]",
                                       markup=True)
    return mem


def _client(url: str, api_key: str | None, plain: bool, *, insecure: bool = False) -> Any:
    """A client of the server at `url`: the standard-library one when the command only dispatches."""
    if not plain:
        from .transport.client import Client

        return Client(url, api_key=api_key, insecure=insecure)
    from .transport.guard import refuse_plaintext_key
    from .transport.light import LightClient

    refuse_plaintext_key(url, api_key, insecure=insecure)
    return LightClient(url, api_key=api_key, retries=3)


def _answering(url: str, api_key: str | None, plain: bool) -> Any | None:
    """A client of the server a lock file names, or None when it does not answer (left to
    DATA_DIR_LOCKED). A dispatching command keeps the connection the check opened."""
    from .transport.guard import refuse_plaintext_key
    from .transport.light import LightClient

    refuse_plaintext_key(url, api_key, insecure=False)
    client = LightClient(url, api_key=api_key, retries=3)
    try:
        client.health(timeout=5.0)
    except CMPError:
        client.close()
        return None
    if plain:
        return client
    client.close()
    return _client(url, api_key, plain)


def _config_show(args: argparse.Namespace, out: Output) -> None:
    config = _load_config(args)
    rows = [{"name": s.name, "value": "***" if s.secret and v else v, "source": src, "env": s.env,
             "help": s.help} for s, v, src in config.items()]
    if out.as_json:
        out.json({"config_file": str(config.path) if config.path else None, "settings": rows})
        return
    from rich.table import Table

    table = Table(title=f"config file: {config.path or 'none'}")
    for column in ("setting", "value", "source", "env"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["name"], str(row["value"]), row["source"], row["env"])
    out.console().print(table)


def _serve(args: argparse.Namespace, out: Output) -> int:
    from .api import open_config
    from .security.keys import ServerKeys
    from .security.ratelimit import FailedAuthLimit, RateLimit
    from .transport.server import ServeOptions, serve

    config = _load_config(args, **{"http.host": args.host, "http.port": args.port, "grpc.port": args.grpc_port,
                                   "grpc.tls_cert": args.tls_cert, "grpc.tls_key": args.tls_key,
                                   "log.format": args.log_format, "audit.allow_broken": args.allow_broken_audit})
    keys = ServerKeys.load(config.data_dir, config["auth.api_keys"], config.storage_settings())
    options = ServeOptions(host=config["http.host"], port=config["http.port"], grpc_port=config["grpc.port"],
                           log_level=args.log_level, decay_interval=config["decay.interval_seconds"],
                           keys=keys, tls_cert=config["grpc.tls_cert"], tls_key=config["grpc.tls_key"],
                           log_format=config["log.format"], allowed_hosts=config["http.allowed_hosts"],
                           allowed_origins=config["http.allowed_origins"],
                           auth_failures=FailedAuthLimit.from_config(config) if keys is not None else None,
                           mcp_stream_seconds=config["mcp.stream_max_seconds"])
    options.check()
    options.rate_limit = RateLimit.from_config(config, loopback=options.loopback)
    url = options.url
    mem = open_config(config, server_url=url)
    grpc = f", gRPC on {options.host}:{options.grpc_port}" if options.grpc_port else ""
    stats = mem.stats()
    semantic = f"on ({stats.embedder})" if stats.embedder else "off"
    print(f"cerememory {__version__} serving {mem.data_dir} on {url}{grpc}\n"
          f"{count(stats.total_records, 'record')}, {count(stats.raw_journal_records, 'journal record')}; "
          f"semantic search {semantic}; console at {url}/ui, API docs at {url}/docs", file=sys.stderr, flush=True)
    serve(mem.engine, options)
    return 0


def _mcp(args: argparse.Namespace) -> int:
    from .transport.client import DEFAULT_URL
    from .transport.mcp_server import run_stdio

    config = _load_config(args)
    run_stdio(config["server_url"] or DEFAULT_URL, api_key=config["server_api_key"], timeout=args.timeout)
    return 0


def _reindex(mem: Any, args: argparse.Namespace, out: Output) -> dict:
    with out.progress("reindexing", None) as advance:
        last = [0]

        def progress(done: int, total: int | None) -> None:
            advance(done - last[0])
            last[0] = done

        return mem.reindex(progress, target=args.target)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = Output("--json" in argv)
    if not argv:  # a first try: show what there is, not an error
        build_parser().print_help()
        return 0
    try:
        args = build_parser(argv[0]).parse_args(argv)
        if args.command == "config":
            _config_show(args, out)
            return 0
        if args.command == "serve":
            return _serve(args, out)
        if args.command == "mcp":
            return _mcp(args)
        if args.command in ("init", "rekey"):
            from . import cli_encryption

            run = cli_encryption.run_init if args.command == "init" else cli_encryption.run_rekey
            return run(args, _load_config(args), out)
        if args.command == "migrate":
            from . import cli_migrate

            return cli_migrate.run_migrate(args, _load_config(args), out)
        if args.command == "migrate-schema":
            from .storage import cli as storage_cli

            return storage_cli.run_migrate_schema(args, _load_config(args), out)
        if args.command in ("keys", "audit-verify"):
            from .security import cli as security_cli

            run_security = security_cli.run_keys if args.command == "keys" else security_cli.run_audit_verify
            return run_security(args, _load_config(args), out)
        request: Any = args.handler(args) if args.handler else None
        with ExitStack() as stack:
            mem = stack.enter_context(_open(args, out, stack))
            if args.command == "dream-tick":
                from .dream import cli as dream_cli

                op, result = "lifecycle.dream_tick", dream_cli.run(mem, args, out)
            elif args.command == "batch":
                op, result = "encode.batch", run_batch(mem, args, out)
            elif args.command == "ingest":
                from .ingest import cli as ingest_cli

                op, result = "ingest", ingest_cli.run(mem, args, out, _load_config(args))
            elif args.command == "reindex":
                op, result = "lifecycle.reindex", _reindex(mem, args, out)
            elif args.command in ("export", "import"):
                from . import cli_archive

                op, result = request[0], cli_archive.run(mem, request, out)
            else:
                op, body = request
                _refuse_working_in_process(mem, [body] if op == "encode.store" else [])
                result = mem.dispatch(op, body)
        out.render(op, result)
        return 0
    except CMPError as exc:
        out.error(exc)
        return EXIT_CODES.get(exc.code, 1)
    except OSError as exc:
        out.error(CMPError(ErrorCode.VALIDATION_ERROR, f"{exc.strerror}: {exc.filename}",
                           hint="check the path"))
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
