"""The one CMP dispatcher: an operation name and a JSON-like request in, the response out.

`Dispatcher` is what every entry point runs operations through: the HTTP routes, the gRPC
servicer, the MCP tools, the background scheduler, the CLI and the embedded `Memory`. It
validates the request against the operation's model (and the CMP header's version), runs the
engine method, writes the audit outcome of an audited operation, and feeds the metrics. The
operations themselves are declared in `operations.py`.
"""

from __future__ import annotations

import contextvars
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack, nullcontext
from functools import partial
from typing import Any, BinaryIO

from pydantic import BaseModel, ValidationError

from ..collector import paused
from ..progress import ProgressFn
from ..security.audit import Running, running
from ..sets import Sets
from ..storage.full import is_disk_full, storage_full
from . import messages as m
from .context import collecting
from .errors import CMPError, ErrorCode, from_validation_error
from .handler import CMPHandler, OpObserver
from .operations import OPERATIONS, Operation, operation
from .plain import PLAIN

Request = dict[str, Any] | BaseModel  # a request as JSON-like data or as its model

__all__ = ["OPERATIONS", "SUPPORTED_MAJOR", "Dispatcher", "Operation", "call", "internal_error", "operation",
           "parse_request"]

SUPPORTED_MAJOR = m.PROTOCOL_VERSION.split(".")[0]


def parse_request(name: str, request: Request | None) -> BaseModel:
    """Validate a request for `name`, checking the optional CMP header's version."""
    op = operation(name)
    if isinstance(request, op.request):
        parsed = request
    else:
        if isinstance(request, BaseModel):
            request = request.model_dump()
        if request is not None and not isinstance(request, dict):
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"{name}: the request must be a JSON object")
        try:
            parsed = op.request.model_validate(request or {})
        except ValidationError as exc:
            raise from_validation_error(exc, op=name) from None
    header = getattr(parsed, "header", None)
    if header is not None:
        if header.protocol != "cmp":
            raise CMPError(ErrorCode.VERSION_MISMATCH, f"unknown protocol {header.protocol!r}",
                           hint="set header.protocol to 'cmp'")
        if header.version.split(".")[0] != SUPPORTED_MAJOR:
            raise CMPError(
                ErrorCode.VERSION_MISMATCH,
                f"CMP version {header.version} is not supported; this server speaks {m.PROTOCOL_VERSION}",
                hint=f"send header.version {m.PROTOCOL_VERSION} or omit the header",
                details={"supported": [m.PROTOCOL_VERSION]},
            )
    return parsed


def _code(exc: BaseException) -> str:
    """The error code a failed call is metered under."""
    return exc.code.value if isinstance(exc, CMPError) else ErrorCode.INTERNAL_ERROR.value


def internal_error(op: str, exc: BaseException) -> CMPError:
    """What a caller is told of a failure that is not a CMPError (an engine bug, an I/O error)."""
    return CMPError(ErrorCode.INTERNAL_ERROR, "internal error", hint="the server log has the details",
                    details={"operation": op, "exception": type(exc).__name__})


class Dispatcher:
    """Runs CMP operations on one engine, writing each audited operation's outcome to the
    engine's audit log (`engine.audit`) and every call to `metrics` when given.

    The engine writes an intent entry before each change it commits; the dispatcher writes the
    operation's outcome: `done` when it returned (audited operations only), `failed` when it
    raised after an intent.
    """

    def __init__(self, engine: CMPHandler, *, metrics: OpObserver | None = None) -> None:
        self.engine = engine
        self.metrics = metrics
        # the operations whose concurrent calls from threads run as sets, when they do (gathers):
        # run one by one, each call's validation, audit entry and answer would follow its group
        # commit on its own thread, and the threads of a group would take the GIL in turn for it
        self._gathered: dict[str, Sets[tuple[contextvars.Context, Request], BaseModel]] = {
            name: Sets(partial(self.call_each, name)) for name, op in OPERATIONS.items()
            if hasattr(engine, op.method + "_each")}

    @classmethod
    def of(cls, target: Dispatcher | CMPHandler) -> Dispatcher:
        """`target` itself when it is a Dispatcher, else a new one (without metrics) over it."""
        return target if isinstance(target, Dispatcher) else cls(target)

    def call(self, name: str, request: Request | None = None, *,
             sink: BinaryIO | None = None, progress: ProgressFn | None = None) -> BaseModel:
        """Validate and run one operation, returning the response model. `sink` and `progress`
        go to the engine method of an operation that declares them (`Operation.options`): an
        in-process export streams into `sink`, and long operations report `(done, total)`.
        Calls that the engine takes together (`gathers`) run as a set with those that other
        threads make meanwhile."""
        gathered = self._gathered.get(name) if sink is None and progress is None else None
        if gathered is not None and request is not None and self.gathers(name):
            return gathered.call((contextvars.copy_context(), request))
        started = time.perf_counter()
        code = "OK"
        try:
            op = operation(name)
            options = self._options(op, sink=sink, progress=progress)
            with paused() if op.bulk else nullcontext():
                return self._run(op, request, options)
        except Exception as exc:
            surfaced = self._surfaced(exc)
            code = _code(surfaced)
            if surfaced is exc:
                raise
            raise surfaced from exc
        finally:
            if self.metrics is not None:
                self.metrics.observe(name, time.perf_counter() - started, code)

    def waiting(self, name: str) -> int:
        """Calls of `name` from threads queued to run in the next set (none for an operation
        that does not gather)."""
        gathered = self._gathered.get(name)
        return 0 if gathered is None else gathered.waiting()

    def gathers(self, name: str) -> bool:
        """Whether concurrent calls of `name` are handed to `call_each` together now: the engine
        takes them as one group (`<method>_each`) and says it gathers them (`gathers`)."""
        gathers = getattr(self.engine, "gathers", None)
        return name in self._gathered and gathers is not None and bool(gathers(name))

    def call_each(self, name: str, calls: Sequence[tuple[contextvars.Context, Request]]
                  ) -> list[BaseModel | BaseException]:
        """Calls of `name` from many callers, each in its own context (its request id, key and
        transport): each answer, or what failed that call, in its place. Each call is validated,
        audited and metered as `call` would, but an engine that takes the calls together
        (`gathers`) commits them as one group, without a thread waiting for each."""
        op = operation(name)
        each = getattr(self.engine, op.method + "_each", None)
        if each is None:
            raise CMPError(ErrorCode.NOT_IMPLEMENTED, f"{name} calls are not taken together by this server",
                           hint="call them one by one (`gathers` tells which operations are taken together)")
        started = time.perf_counter()
        outcomes: list[BaseModel | BaseException] = []
        running_calls = []  # (place, context, request, ids the engine noted, its audit run, what ends them)
        for context, body in calls:
            try:
                parsed = context.run(parse_request, name, body)
            except Exception as exc:  # noqa: BLE001 - this call fails alone
                outcomes.append(self._surfaced(exc))
                continue
            scopes = ExitStack()  # entered in the call's context, which keeps them until closed
            touched = context.run(scopes.enter_context, collecting())
            run = context.run(scopes.enter_context, running(name))
            running_calls.append((len(outcomes), context, parsed, touched, run, scopes))
            outcomes.append(parsed)
        try:
            answers = each([(parsed, context) for _, context, parsed, *_ in running_calls])
        except Exception as exc:  # noqa: BLE001 - a fault of the whole group fails each call of it
            answers = [exc] * len(running_calls)
        finally:
            for _, context, *_, scopes in running_calls:
                context.run(scopes.close)
        done = []  # the audit's `done` entries of the set, written together
        for (place, context, parsed, touched, run, _), answer in zip(running_calls, answers, strict=True):
            if isinstance(answer, BaseException):
                context.run(self._audit_outcome, op, parsed, answer, touched, run)
            elif op.audited:
                done.append((context, parsed, answer, touched))
            outcomes[place] = self._surfaced(answer) if isinstance(answer, BaseException) else answer
        if done and self.engine.audit is not None:
            self.engine.audit.record_each(name, done)
        if self.metrics is not None:  # each in its call's context, which names its transport
            took = time.perf_counter() - started
            for (context, _), outcome in zip(calls, outcomes, strict=True):
                code = _code(outcome) if isinstance(outcome, BaseException) else "OK"
                context.run(self.metrics.observe, name, took, code)
        return outcomes

    def _surfaced(self, exc: BaseException) -> BaseException:
        """What a call that raised `exc` fails with: a full disk, wherever it surfaced (a key
        file, an index), as one STORAGE_FULL error."""
        if isinstance(exc, CMPError) or not is_disk_full(exc):
            return exc
        error = storage_full(self.engine.data_dir)
        error.__cause__ = exc
        return error

    def _run(self, op: Operation, request: Request | None, options: dict[str, Any]) -> BaseModel:
        name = op.name
        parsed = parse_request(name, request)
        method = getattr(self.engine, op.method, None)
        if method is None:
            raise CMPError(
                ErrorCode.NOT_IMPLEMENTED,
                f"{name} is not implemented by this server yet",
                hint="see `cerememory --help` for the operations available",
                details={"operation": name},
            )
        with collecting() as touched, running(name) as run:
            try:
                result: BaseModel | None = method(parsed, **options)
            except Exception as exc:
                self._audit_outcome(op, parsed, exc, touched, run)
                raise
        result = result if result is not None else m.Empty()
        self._audit_outcome(op, parsed, result, touched, run)
        return result

    def _audit_outcome(self, op: Operation, parsed: BaseModel, outcome: BaseModel | BaseException,
                       touched: list[uuid.UUID], run: Running) -> None:
        """The audit log's outcome entry of one call: `done` for an audited operation that
        answered, `failed` for one that raised after writing an intent."""
        audit = self.engine.audit
        if audit is None:
            return
        if isinstance(outcome, BaseException):
            if run.intents:
                audit.record_failure(op.name, parsed, outcome, touched)
        elif op.audited:
            audit.record(op.name, parsed, outcome, touched)

    def dispatch(self, name: str, request: Request | None = None, *,
                 plain: bool = False) -> dict[str, Any]:
        """JSON in, JSON out, as the transports speak it; every failure raises a CMPError. With
        `plain`, a read of the simple shapes cmp/plain.py knows is answered by the engine in
        JSON without building its models (the same answer; for an embedded caller, whose process
        often runs one command)."""
        try:
            if plain and isinstance(request, dict):
                answer = self._plain(name, request)
                if answer is not None:
                    return answer
            return self.call(name, request).model_dump(mode="json")
        except CMPError:
            raise
        except Exception as exc:  # an engine bug must still reach the client as an envelope
            raise internal_error(name, exc) from exc

    def _plain(self, name: str, request: dict[str, Any]) -> dict[str, Any] | None:
        recognise = PLAIN.get(name)
        method = getattr(self.engine, operation(name).method + "_plain", None) if recognise else None
        parsed = recognise(request) if recognise is not None and method is not None else None
        if parsed is None or method is None:
            return None
        started = time.perf_counter()
        try:
            answer: dict[str, Any] | None = method(parsed)
        except Exception as exc:
            code = exc.code.value if isinstance(exc, CMPError) else ErrorCode.INTERNAL_ERROR.value
            self._observe(name, started, code)
            raise
        if answer is not None:  # else the model path answers, and is metered
            self._observe(name, started, "OK")
        return answer

    def _observe(self, name: str, started: float, code: str) -> None:
        if self.metrics is not None:
            self.metrics.observe(name, time.perf_counter() - started, code)

    @staticmethod
    def _options(op: Operation, **given: Any) -> dict[str, Any]:
        options = {key: value for key, value in given.items() if value is not None}
        unknown = set(options) - op.options
        if unknown:
            raise TypeError(f"{op.name} takes no {', '.join(sorted(unknown))}")
        return options


def call(handler: CMPHandler, name: str, request: Request | None = None) -> BaseModel:
    """Run one operation on `handler` without metrics: `Dispatcher(handler).call(...)`."""
    return Dispatcher(handler).call(name, request)
