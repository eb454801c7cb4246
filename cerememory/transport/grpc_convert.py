"""Proto messages <-> CMP JSON: the one place where the gRPC types meet the pydantic models.

The proto mirrors the pydantic models field for field, so both directions walk the message
descriptors and read or write fields directly (`json_format` only for Struct values). What CMP
JSON does differently is handled here: lower-case enum values (STORE_TYPE_EPISODIC <->
"episodic"), times written as pydantic writes them, bytes as base64, null for absent optional
fields and for empty lists the model allows to be null, and `text` beside `data` on text
blocks. Requests come out with absent fields left out, so the CMP defaults apply; responses come
out complete, exactly as `dispatch` returns them.
"""

from __future__ import annotations

import types
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from functools import cache, lru_cache
from typing import Annotated, Any, TypeVar, Union, cast, get_args, get_origin

from google.protobuf import empty_pb2, json_format, struct_pb2
from google.protobuf.descriptor import (
    Descriptor,
    EnumDescriptor,
    FieldDescriptor,
    MethodDescriptor,
    ServiceDescriptor,
)
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python

from ..cmp import messages as m
from ..cmp.dispatch import OPERATIONS, Operation, operation
from ..cmp.errors import CMPError, ErrorCode
from ..model import (
    INSTANTS_KEPT,
    Bytes,
    EmbeddingF32,
    EmbeddingRowsF32,
    Modality,
    UtcDatetime,
    base64_text,
    instance_of,
    iso_utc,
)
from ..v1 import cerememory_pb2 as pb

SERVICE: ServiceDescriptor = pb.DESCRIPTOR.services_by_name["CerememoryService"]
SERVICE_NAME: str = SERVICE.full_name

# wire conventions the server and the client share
ERROR_KEY = "cmp-error"  # trailing metadata: the CMP error envelope as JSON
REQUEST_ID_KEY = "x-request-id"
CHUNK_BYTES = 64 * 1024  # archive chunk size of Export and Import
MAX_MESSAGE_BYTES = 128 * 1024 * 1024  # one unary message: a 50 MiB video block and then some

_TIMESTAMP = "google.protobuf.Timestamp"
_CONTENT_BLOCK = "cerememory.v1.ContentBlock"
_TEXT_ALIAS = "cerememory.v1.ContentBlock.text"  # request convenience, not a model field
_INT64 = {FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64}
_FLOATS = {FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT}
_DATETIME: TypeAdapter[datetime] = TypeAdapter(UtcDatetime)
_BYTES: TypeAdapter[bytes] = TypeAdapter(Bytes)
# bytes fields with a form of their own: vectors, also given in process as numpy arrays
_BYTES_OF: dict[str, TypeAdapter[bytes]] = {"cerememory.v1.ContentBlock.embedding_f32": TypeAdapter(EmbeddingF32),
                                            "cerememory.v1.EncodeBatchRequest.embeddings_f32":
                                                TypeAdapter(EmbeddingRowsF32)}
M = TypeVar("M", bound=BaseModel)


# ---------------------------------------------------------------- message types


def message_class(model: type[BaseModel]) -> type[Message]:
    """The proto message mirroring a pydantic model (same name; m.Empty is protobuf's Empty)."""
    message: type[Message] = empty_pb2.Empty if model is m.Empty else getattr(pb, model.__name__)
    return message


def rpc_method(op: Operation) -> MethodDescriptor:
    """The method of CerememoryService that runs `op` (its `rpc`, as the operation table declares):
    unary, except the archive streams (server-streaming Export, client-streaming Import)."""
    method: MethodDescriptor = SERVICE.methods_by_name[op.rpc]
    return method


def request_class(op: str) -> type[Message]:
    return message_class(operation(op).request)


def response_class(op: str) -> type[Message]:
    return message_class(operation(op).response)


# ---------------------------------------------------------------- enums


@cache
def _enum_names(enum: EnumDescriptor) -> dict[str, str]:
    """STORE_TYPE_EPISODIC -> "episodic"; the prefix is the UNSPECIFIED value's."""
    prefix = enum.values_by_number[0].name.removesuffix("UNSPECIFIED")
    return {v.name: v.name.removeprefix(prefix).lower() for v in enum.values if v.number != 0}


@cache
def _enum_values(enum: EnumDescriptor) -> dict[str, str]:
    return {value: name for name, value in _enum_names(enum).items()}


def enum_values(enum: EnumDescriptor) -> list[str]:
    """The CMP spellings of a proto enum's values, in proto order."""
    return list(_enum_names(enum).values())


# ---------------------------------------------------------------- CMP JSON -> proto


class _Invalid(Exception):
    def __init__(self, where: str, message: str, code: ErrorCode = ErrorCode.VALIDATION_ERROR) -> None:
        super().__init__(message)
        self.where, self.message, self.code = where or "request", message, code


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _as_dict(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if not isinstance(value, Mapping):
        raise _Invalid(where, "Input should be an object")
    return dict(value)


def _as_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise _Invalid(where, "Input should be a list")
    return list(value)


def _enum_to_wire(value: Any, enum: EnumDescriptor, where: str) -> str:
    name = _enum_values(enum).get(value) if isinstance(value, str) else None
    if name is None:
        allowed = ", ".join(repr(v) for v in _enum_values(enum))
        code = ErrorCode.STORE_INVALID if enum.name == "StoreType" else ErrorCode.VALIDATION_ERROR
        raise _Invalid(where, f"Input should be one of {allowed}", code)
    return name


def _validated(adapter: TypeAdapter[Any], value: Any, where: str) -> Any:
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        raise _Invalid(where, exc.errors(include_url=False)[0]["msg"]) from None


_KIND = {FieldDescriptor.CPPTYPE_INT32: "an integer", FieldDescriptor.CPPTYPE_INT64: "an integer",
         FieldDescriptor.CPPTYPE_UINT32: "an integer", FieldDescriptor.CPPTYPE_UINT64: "an integer",
         FieldDescriptor.CPPTYPE_DOUBLE: "a number", FieldDescriptor.CPPTYPE_FLOAT: "a number",
         FieldDescriptor.CPPTYPE_BOOL: "a boolean", FieldDescriptor.CPPTYPE_STRING: "a string"}


def _scalar_to_wire(value: Any, fd: FieldDescriptor, where: str) -> Any:
    """One scalar value of a field as the message stores it."""
    if fd.cpp_type == FieldDescriptor.CPPTYPE_ENUM:
        return fd.enum_type.values_by_name[_enum_to_wire(value, fd.enum_type, where)].number
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return _validated(_BYTES_OF.get(fd.full_name, _BYTES), value, where)
    if isinstance(value, uuid.UUID | Enum):
        return str(value.value if isinstance(value, Enum) else value)
    if isinstance(value, bool) and fd.cpp_type != FieldDescriptor.CPPTYPE_BOOL:
        raise _Invalid(where, f"Input should be {_KIND.get(fd.cpp_type, 'another type')}, not a boolean")
    return value


def _message_to_wire(message: Message, value: Any, where: str) -> None:
    """Write `value` into the (sub)message `message`, which is then present even when empty."""
    name = message.DESCRIPTOR.full_name
    if name == _TIMESTAMP:
        message.FromDatetime(_validated(_DATETIME, value, where))
    elif name in _JSON_TYPES:
        try:
            json_format.ParseDict(to_jsonable_python(value), message)
        except json_format.ParseError as exc:
            raise _Invalid(where, str(exc)) from None
    else:
        _to_wire(message, value, where)
        message.SetInParent()


def _to_wire(message: Message, value: Any, path: str) -> None:
    """CMP JSON (or the Python objects `dispatch` accepts) written into `message`, field by field."""
    desc = message.DESCRIPTOR
    for key, item in _as_dict(value, path).items():
        where = _join(path, key)
        fd = desc.fields_by_name.get(key)
        if fd is None:
            raise _Invalid(where, "unknown field")
        if item is None:
            continue
        try:
            if _is_map(fd):
                value_fd = fd.message_type.fields_by_name["value"]
                entries = getattr(message, key)
                for k, v in _as_dict(item, where).items():
                    if value_fd.message_type is not None:
                        _message_to_wire(entries[str(k)], v, _join(where, str(k)))
                    else:
                        entries[str(k)] = _scalar_to_wire(v, value_fd, _join(where, str(k)))
            elif fd.is_repeated:
                items = _as_list(item, where)
                if fd.message_type is not None:
                    for i, v in enumerate(items):
                        _message_to_wire(getattr(message, key).add(), v, f"{where}[{i}]")
                else:
                    getattr(message, key).extend([_scalar_to_wire(v, fd, f"{where}[{i}]")
                                                  for i, v in enumerate(items)])
            elif fd.message_type is not None:
                _message_to_wire(getattr(message, key), item, where)
            else:
                setattr(message, key, _scalar_to_wire(item, fd, where))
        except (TypeError, ValueError) as exc:  # a value of the wrong type or out of range
            raise _Invalid(where, f"Input should be {_KIND.get(fd.cpp_type, 'another type')}: {exc}") from None
    if desc.full_name == _CONTENT_BLOCK and message.HasField("text") and message.data:
        # JSON repeats a text block's data as `text`; the wire carries it once, as the readable
        # `text` (what grpcurl and other generic clients show), not as bytes they print as base64
        if message.data == message.text.encode():
            message.ClearField("data")


def json_to_message(data: Any, cls: type[Message], *, context: str = "") -> Message:
    """Build a `cls` message from CMP JSON; bad input raises a CMP validation error."""
    prefix = f"{context}: " if context else ""
    message = cls()
    try:
        _to_wire(message, data or {}, "")
    except _Invalid as exc:
        hint = "stores are episodic, semantic, procedural, emotional, working" \
            if exc.code is ErrorCode.STORE_INVALID else None
        raise CMPError(exc.code, f"{prefix}{exc.where}: {exc.message}", hint=hint,
                       details={"field": exc.where}) from None
    return message


# ---------------------------------------------------------------- model -> proto, directly

# A response goes from the model `Dispatcher.call` returns straight into the message, without
# the JSON in between: each (model, message) pair gets a function once (`_compiled`) that turns
# the model's field values into what the message constructor takes (a submessage as a dict, a
# Timestamp as its integer fields, a Struct as the dict, an enum as its number); the constructor
# then builds the whole tree in C. The message is the one `json_to_message` builds from the
# model's JSON.

Writer = Callable[[Any], Any]


def _text_of(value: Any) -> Any:
    if type(value) is str:
        return value
    return str(value.value if isinstance(value, Enum) else value)


_uuid_text: Callable[[uuid.UUID], str] = lru_cache(maxsize=1 << 14)(str)
"""A record id as text, kept by id: `UUID.__str__` is Python code, and answers repeat ids."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@lru_cache(maxsize=INSTANTS_KEPT)
def _timestamp(value: datetime) -> dict[str, int]:
    """A Timestamp's fields, in integers (what `Timestamp.FromDatetime` gives, without its detour
    through a time tuple). Kept by instant, as `model.iso_utc` keeps its text: a record's times
    are mostly one instant, and answers repeat records. (The constructor only reads the dict.)"""
    since = (value if value.tzinfo is not None else value.replace(tzinfo=UTC)) - _EPOCH
    return {"seconds": since.days * 86400 + since.seconds, "nanos": since.microseconds * 1000}


def _datetime(value: Message) -> datetime:
    """A Timestamp as `ToDatetime(tzinfo=UTC)` gives it (nanos round down to microseconds), in one step."""
    return _instant(value.seconds, value.nanos)


@lru_cache(maxsize=INSTANTS_KEPT)
def _instant(seconds: int, nanos: int) -> datetime:
    """Kept by instant, as `_timestamp` is on the way out: a record's times are mostly one
    instant, and answers repeat records (a datetime is immutable, so one can be shared)."""
    return _EPOCH + timedelta(seconds=seconds, microseconds=nanos // 1000)


def _json_value(fd: FieldDescriptor) -> Writer:
    cls = GetMessageClass(fd.message_type)

    def write(value: Any) -> Any:
        # a NaN or an infinity (stored before requests were held to finite numbers) as null, as
        # HTTP answers it: a Value holding one is refused by every JSON reader of the answer
        value = to_jsonable_python(value, inf_nan_mode="null")
        if isinstance(value, dict) and cls is struct_pb2.Struct:
            return value
        message = cls()
        json_format.ParseDict(value, message)
        return message

    return write


@cache
def _writer(fd: FieldDescriptor) -> Writer | None:
    """How one value of `fd` becomes what the message constructor takes (None: as it is)."""
    if fd.cpp_type == FieldDescriptor.CPPTYPE_ENUM:
        numbers = {value: fd.enum_type.values_by_name[name].number
                   for value, name in _enum_values(fd.enum_type).items()}
        return numbers.__getitem__  # a StrEnum member hashes as its value
    if fd.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
        name = fd.message_type.full_name
        if name == _TIMESTAMP:
            return _timestamp
        if name in _JSON_TYPES:
            return _json_value(fd)
        return _nested_writer(fd.message_type)
    if fd.cpp_type == FieldDescriptor.CPPTYPE_STRING and fd.type != FieldDescriptor.TYPE_BYTES:
        return _text_of
    return None


_EMPTY_STRUCT = struct_pb2.Struct()  # an empty Struct goes in as a message: its dict form runs Python


def _field_type(model: type[BaseModel], name: str, shape: str) -> Any:
    """The type of one value of a model's field (a list's item, a map's value), unwrapped."""
    tp = _unwrap(model.model_fields[name].annotation)[1]
    if shape != "one" and get_args(tp):
        tp = _unwrap(get_args(tp)[-1 if shape == "map" else 0])[1]
    return tp


_COMPILING: set[tuple[type, Descriptor]] = set()  # writers being made (a model type may nest itself)


def _value_code(model: type[BaseModel], name: str, fd: FieldDescriptor, shape: str, i: int,
                names: dict[str, Any]) -> str | None:
    """The expression writing one value `v` of a field (None: as it is). A submessage of a known
    model type calls that type's function directly; the writer by the field's descriptor
    (`_writer`) takes any other value, so the output is the same either way."""
    write = _writer(fd)
    if write is None:
        return None
    names[f"w{i}"] = write
    tp = _field_type(model, name, shape)
    message = fd.message_type
    if message is not None and isinstance(tp, type) and issubclass(tp, BaseModel) \
            and message.full_name not in _JSON_TYPES and (tp, message) not in _COMPILING:
        names[f"c{i}"], names[f"T{i}"] = _compiled(tp, message), tp
        return f"c{i}(v) if type(v) is T{i} else w{i}(v)"
    if tp is uuid.UUID:
        names["UUID"], names["uuid_text"] = uuid.UUID, _uuid_text
        return f"uuid_text(v) if type(v) is UUID else w{i}(v)"
    if write is _text_of:  # str in the model: no call for what is already text
        return f"v if type(v) is str else w{i}(v)"
    if message is not None and message.full_name == "google.protobuf.Struct":
        return f"w{i}(v) if v else EMPTY_STRUCT"
    return f"w{i}(v)"


_FIELD_CODE = {  # how the constructor argument `name` is read from the model's field values `d`
    "one": "    v = d[{name!r}]\n    if v {test}:\n        out[{name!r}] = {value}\n",
    "list": "    x = d[{name!r}]\n    if x:\n        out[{name!r}] = {listed}\n",
    "map": "    x = d[{name!r}]\n    if x:\n        out[{name!r}] = {mapped}\n",
}


def _paired_fields(model: type[BaseModel], desc: Descriptor,
                   missing: type[Exception]) -> Iterator[tuple[int, str, FieldDescriptor]]:
    """Each field of `model` in order, with its number and the field of `desc` carrying it; a
    field the message lacks raises `missing`."""
    for i, name in enumerate(model.model_fields):
        fd = desc.fields_by_name.get(name)
        if fd is None:
            raise missing(f"{desc.full_name} has no field {name} of {model.__name__} (see schema_problems())")
        yield i, name, fd


@cache
def _compiled(model: type[BaseModel], desc: Descriptor) -> Callable[[BaseModel], dict[str, Any]]:
    """A function writing the constructor arguments of `desc` for a `model`, made once per pair:
    one straight line of code per field (as `dataclasses` makes its methods), several times
    quicker than a loop that looks at each field's shape on every call."""
    lines = ["def write(model):\n    d = model.__dict__\n    out = {}\n"]
    names: dict[str, Any] = {"TEXT": Modality.TEXT, "EMPTY_STRUCT": _EMPTY_STRUCT}
    _COMPILING.add((model, desc))
    try:
        for i, name, fd in _paired_fields(model, desc, TypeError):
            if _is_map(fd):
                shape, value_fd = "map", fd.message_type.fields_by_name["value"]
            else:
                shape, value_fd = ("list" if fd.is_repeated else "one"), fd
            code = _value_code(model, name, value_fd, shape, i, names)
            # a zero the message has no presence for is what the wire leaves out anyway (not a
            # float's: -0.0 is falsy, yet the wire carries its sign)
            zero_is_absent = not (fd.has_presence or fd.message_type is not None or fd.cpp_type in _FLOATS)
            test = "" if zero_is_absent else "is not None"
            lines.append(_FIELD_CODE[shape].format(
                name=name, value=code or "v", test=test,
                listed=f"[{code} for v in x]" if code else "list(x)",
                mapped=f"{{str(k): {code} for k, v in x.items()}}" if code else "{str(k): v for k, v in x.items()}"))
    finally:
        _COMPILING.discard((model, desc))
    if desc.full_name == _CONTENT_BLOCK:  # the wire carries a text block once, as text
        lines.append("    if model.modality is TEXT:\n        out['text'] = out.pop('data', b'').decode('utf-8')\n")
    lines.append("    return out\n")
    exec("".join(lines), names)  # noqa: S102 - the code is made here, from field names
    function: Callable[[BaseModel], dict[str, Any]] = names["write"]
    return function


def _nested_writer(desc: Descriptor) -> Writer:
    """`_model_fields(value, desc)` for a field's values, with the function of each model type
    looked up once per type rather than per value."""
    compiled: dict[type, Callable[[BaseModel], dict[str, Any]]] = {}

    def write(value: Any) -> Any:
        function = compiled.get(type(value))
        if function is None:
            if not isinstance(value, BaseModel):
                return _model_fields(value, desc)
            function = compiled[type(value)] = _compiled(type(value), desc)
        return function(value)

    return write


def _model_fields(value: Any, desc: Descriptor) -> Any:
    """The constructor arguments of `desc` for the model `value` (JSON-like values take the JSON path)."""
    if isinstance(value, BaseModel):
        return _compiled(type(value), desc)(value)
    message = GetMessageClass(desc)()
    _message_to_wire(message, value, "")
    return message


def model_to_message(model: BaseModel, cls: type[Message]) -> Message:
    """The `cls` message of a model: the message `json_to_message` makes of its JSON, built directly."""
    try:
        return cls(**_model_fields(model, cls.DESCRIPTOR))
    except _Invalid as exc:
        raise CMPError(exc.code, f"{exc.where}: {exc.message}", details={"field": exc.where}) from None


# ---------------------------------------------------------------- proto -> CMP JSON


def _value_json(value: struct_pb2.Value) -> Any:
    """A protobuf `Value` as JSON. Its numbers are doubles: integral ones go back to ints, as JSON
    parsers read them. A NaN or an infinity is kept (json_format would raise on it), so that the
    request's validation refuses it by name, as it refuses the same value from any caller. The
    nesting is bounded: a protobuf parser stops at 100 nested messages."""
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        number = value.number_value
        return int(number) if number.is_integer() and abs(number) <= 2**53 else number
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return _struct_json(value.struct_value)
    if kind == "list_value":
        return _list_json(value.list_value)
    return None  # null_value, or no kind at all (which json_format reads as null too)


def _struct_json(struct: struct_pb2.Struct) -> dict[str, Any]:
    return {key: _value_json(item) for key, item in struct.fields.items()}


def _list_json(values: struct_pb2.ListValue) -> list[Any]:
    return [_value_json(item) for item in values.values]


_JSON_READERS: dict[str, Callable[[Any], Any]] = {
    "google.protobuf.Struct": _struct_json, "google.protobuf.Value": _value_json,
    "google.protobuf.ListValue": _list_json}
_JSON_TYPES = frozenset(_JSON_READERS)  # the messages that carry free-form JSON


def _enum_from_wire(number: int, enum: EnumDescriptor) -> Any:
    value = enum.values_by_number.get(number)
    if value is None:
        return number  # a value this build does not know, as json_format prints it
    return _enum_names(enum).get(value.name, value.name)


Reader = Callable[[Any, bool], Any]


@cache
def _reader(fd: FieldDescriptor) -> Reader | None:
    """How one value of `fd` becomes CMP JSON (value, full) -> JSON; None: as it is."""
    if fd.cpp_type == FieldDescriptor.CPPTYPE_ENUM:
        enum = fd.enum_type
        known = {v.number: _enum_from_wire(v.number, enum) for v in enum.values}  # one lookup per value
        return lambda value, full: known.get(value, value)
    if fd.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
        name = fd.message_type.full_name
        if name == _TIMESTAMP:
            return lambda value, full: iso_utc(_datetime(value))  # what UtcDatetime's JSON serialiser calls
        if name in _JSON_READERS:
            read = _JSON_READERS[name]
            return lambda value, full: read(value)
        return _from_wire
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return lambda value, full: base64_text(value)
    return None


@dataclass(frozen=True)
class _Field:
    """What reading one field of a message takes, worked out once per field."""

    fd: FieldDescriptor
    name: str
    shape: str  # "map", "list" or "one"
    read: Reader | None
    nullable: bool  # its model field may be None
    unspecified: str | None  # an enum's zero name, which reads as "not given"


@cache
def _fields(desc: Descriptor) -> tuple[_Field, ...]:
    nullable = _schema().nullable
    fields = []
    for fd in desc.fields:
        if fd.full_name == _TEXT_ALIAS:
            continue
        if _is_map(fd):
            shape, read = "map", _reader(fd.message_type.fields_by_name["value"])
        else:
            shape, read = ("list" if fd.is_repeated else "one"), _reader(fd)
        unspecified = fd.enum_type.values_by_number[0].name if fd.enum_type is not None else None
        fields.append(_Field(fd, fd.name, shape, read, fd.full_name in nullable, unspecified))
    return tuple(fields)


def _from_wire(message: Message, full: bool) -> dict[str, Any]:
    """A proto message -> CMP JSON, read field by field; `full` writes every field (null when
    absent), else only those that were given."""
    out: dict[str, Any] = {}
    for f in _fields(message.DESCRIPTOR):
        name, read = f.name, f.read
        if f.shape == "map":
            items = getattr(message, name)
            entries = {k: read(v, full) for k, v in items.items()} if read else dict(items)
            if entries or (full and not f.nullable):
                out[name] = entries
            elif full:
                out[name] = None  # a map the model allows to be null: an empty one was not given
        elif f.shape == "list":
            values = getattr(message, name)
            listed = [read(v, full) for v in values] if read else list(values)
            if listed or not f.nullable:
                out[name] = listed
            elif full:
                out[name] = None
        elif message.HasField(name) if f.fd.has_presence else (full or getattr(message, name) != f.fd.default_value):
            value = getattr(message, name)
            if read is not None:
                value = read(value, full)
            if f.unspecified is not None and value == f.unspecified:
                value = None  # UNSPECIFIED: not given
            if value is not None or full:
                out[name] = value
        elif full:
            out[name] = None
    if message.DESCRIPTOR.full_name == _CONTENT_BLOCK:
        _block_text(message, out, full)
    return out


def _block_text(message: Message, out: dict[str, Any], full: bool) -> None:
    """A content block's `text`, and its `data` when the text travelled alone."""
    if message.HasField("text"):
        out["text"] = message.text
        if not message.data:  # the text travelled alone: its bytes are the text's
            if full:
                out["data"] = base64_text(message.text.encode("utf-8"))
            else:
                out.pop("data", None)
    elif full and out.get("modality") == "text":
        out["text"] = message.data.decode("utf-8")


def _typed_block(message: Message, out: dict[str, Any]) -> None:
    """A content block for its model: the text when it travelled (the model makes the bytes)."""
    if message.HasField("text"):
        out["text"] = message.text
        if not message.data:
            out.pop("data", None)


def _as_datetime(value: Message, full: bool) -> datetime:
    return _datetime(value)


def _typed_read(f: _Field) -> Reader | None:
    """`f.read` for a model's validation rather than for JSON: times stay datetimes and bytes
    stay bytes, so that neither is written as text only to be parsed back."""
    fd = f.fd.message_type.fields_by_name["value"] if f.shape == "map" else f.fd
    if fd.message_type is not None and fd.message_type.full_name == _TIMESTAMP:
        return _as_datetime
    return None if fd.type == FieldDescriptor.TYPE_BYTES else f.read


def _read_full(message: Message) -> dict[str, Any]:
    return _full_reader(message.DESCRIPTOR, False)(message)


def _read_typed(message: Message) -> dict[str, Any]:
    return _full_reader(message.DESCRIPTOR, True)(message)


_BUILDING: set[tuple[Descriptor, bool]] = set()  # readers being made (a message type may nest itself)


@cache
def _full_reader(desc: Descriptor, typed: bool) -> Callable[[Message], dict[str, Any]]:
    """`_from_wire(message, full=True)` for messages of `desc`, as a function made once per
    message type with one straight line of code per field: what a client does with every
    answer, several times quicker than the loop. `typed`: the values a model validates
    (`_typed_read`) instead of JSON. The readers of submessages, enums and times are bound in
    directly (no per-value lookup of the submessage's reader)."""
    names: dict[str, Any] = {"_read_full": _read_full, "_read_typed": _read_typed, "_block_text": _block_text,
                             "_typed_block": _typed_block, "_datetime": _datetime}
    _BUILDING.add((desc, typed))
    try:
        lines = _reader_lines(desc, typed, names)
    finally:
        _BUILDING.discard((desc, typed))
    exec("\n".join(lines) + "\n", names)  # noqa: S102 - the code is made here, from field names
    function: Callable[[Message], dict[str, Any]] = names["read"]
    return function


def _reader_lines(desc: Descriptor, typed: bool, names: dict[str, Any]) -> list[str]:
    """The lines of `_full_reader`'s function; the values they call are put in `names`."""

    def read(f: _Field, i: int, value: str) -> str:
        """The expression reading one value of `f` from the expression `value`."""
        reader = _typed_read(f) if typed else f.read
        if reader is None:
            return value
        if reader is _from_wire:
            fd = f.fd.message_type.fields_by_name["value"] if f.shape == "map" else f.fd
            if (fd.message_type, typed) in _BUILDING:  # a message within itself: looked up per value
                return f"{'_read_typed' if typed else '_read_full'}({value})"
            names[f"n{i}"] = _full_reader(fd.message_type, typed)
            return f"n{i}({value})"
        if reader is _as_datetime:
            return f"_datetime({value})"
        if f.fd.enum_type is not None and f.shape == "one":  # the number's CMP value; UNSPECIFIED: None
            names[f"e{i}"] = {v.number: None if v.number == 0 else reader(v.number, True)
                              for v in f.fd.enum_type.values}
            return f"e{i}.get({value}, {value})"
        names[f"r{i}"] = reader
        return f"r{i}({value}, True)"

    lines = ["def read(m):", "    out = {}", "    has = m.HasField"]
    for i, f in enumerate(_fields(desc)):
        field = f"m.{f.name}"
        plain = (_typed_read(f) if typed else f.read) is None
        if f.shape == "map":
            lines.append(f"    x = dict({field})" if plain else
                         f"    x = {{k: {read(f, i, 'v')} for k, v in {field}.items()}}")
        elif f.shape == "list":
            lines.append(f"    x = list({field})" if plain else f"    x = [{read(f, i, 'v')} for v in {field}]")
        else:
            presence = f" if has({f.name!r}) else None" if f.fd.has_presence else ""
            if f.fd.enum_type is not None and not plain:
                lines.append(f"    x = {field}")
                lines.append(f"    x = {read(f, i, 'x')}{presence}")
            else:
                lines.append(f"    x = {read(f, i, field)}{presence}")
        if f.shape != "one" and f.nullable:  # an empty one the model allows to be null was not given
            lines.append("    x = x if x else None")
        lines.append(f"    out[{f.name!r}] = x")
    if desc.full_name == _CONTENT_BLOCK:
        lines.append("    _typed_block(m, out)" if typed else "    _block_text(m, out, True)")
    lines.append("    return out")
    return lines


# ---------------------------------------------------------------- proto -> model, directly

# An answer of our server is made of models the server validated, so every validator has
# already run on it and what the proto carries is a fixed point of them: the client builds the
# response model straight from the message (`model.instance_of`), without a dict and without
# validating it again, the way `_compiled` writes the message straight from the model. A value
# out of the model's range (an enum's UNSPECIFIED or an absent message where the model wants
# one, an id that is no UUID) sends the answer down the validating path, which says what is
# wrong; so does a model whose fields a direct build does not know how to make.


class _Unbuildable(Exception):
    """A model type a direct build does not make (its answers are validated instead)."""


_uuid_of: Callable[[str], uuid.UUID] = lru_cache(maxsize=1 << 14)(uuid.UUID)
"""A record id from its text, kept by text: answers repeat ids, and `UUID()` is Python code."""

_SCALAR_TYPES = (bool, int, float, str, bytes)


def _item_code(tp: Any, fd: FieldDescriptor, i: int, names: dict[str, Any], value: str) -> str:
    """The expression making one model value of type `tp` from the proto value `value` of `fd`;
    the values it calls are put in `names`."""
    message = fd.message_type
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if message is None or message.full_name in _JSON_TYPES or message.full_name == _TIMESTAMP:
            raise _Unbuildable(f"{fd.full_name} carries no {tp.__name__}")
        names[f"T{i}"] = tp
        if (tp, message) in _BUILDING_MODELS:  # a model within itself: its builder looked up per value
            return f"_build(T{i}, {value})"
        names[f"b{i}"] = _model_builder(tp, message)
        return f"b{i}({value})"
    if isinstance(tp, type) and issubclass(tp, Enum) and fd.enum_type is not None:
        # by number; a number the model does not know fails (KeyError)
        names[f"e{i}"] = {number: tp(value_) for number, value_ in
                          ((v.number, _enum_names(fd.enum_type).get(v.name)) for v in fd.enum_type.values)
                          if value_ is not None}
        return f"e{i}[{value}]"
    if tp is datetime and message is not None and message.full_name == _TIMESTAMP:
        return f"_datetime({value})"
    if tp is uuid.UUID and fd.type == FieldDescriptor.TYPE_STRING:
        return f"_uuid_of({value})"
    if (tp is Any or get_origin(tp) is dict) and message is not None and message.full_name in _JSON_TYPES:
        names[f"r{i}"] = _reader(fd)
        return f"r{i}({value}, True)"
    if tp in _SCALAR_TYPES and message is None and fd.enum_type is None:
        return value
    raise _Unbuildable(f"{fd.full_name} as {tp}")


def _field_code(model: type[BaseModel], name: str, fd: FieldDescriptor, i: int, names: dict[str, Any]) -> str:
    """The expression of the model value of the field `name` of the message `m`."""
    nullable, tp = _unwrap(model.model_fields[name].annotation)
    origin, field = get_origin(tp), f"m.{name}"
    if _is_map(fd) or fd.is_repeated:
        if origin is not (dict if _is_map(fd) else list) and not (origin is tuple and fd.is_repeated):
            raise _Unbuildable(f"{fd.full_name} as {tp}")
        if _is_map(fd):
            code = _item_code(_unwrap(get_args(tp)[1])[1], fd.message_type.fields_by_name["value"], i, names, "v")
            value = f"{{k: {code} for k, v in {field}.items()}}"
        else:
            code = _item_code(_unwrap(get_args(tp)[0])[1], fd, i, names, "v")
            value = f"[{code} for v in {field}]" if code != "v" else f"list({field})"
            value = f"tuple({value})" if origin is tuple else value
        return f"(x if (x := {value}) else None)" if nullable else value  # an empty one was not given
    code = _item_code(tp, fd, i, names, field)
    if fd.enum_type is not None and nullable:
        names[f"e{i}"][0] = None  # UNSPECIFIED: not given (where the model wants a value: a KeyError)
    if not fd.has_presence:
        return code
    return f"{code} if has({name!r}) else {'None' if nullable else f'absent({name!r})'}"


def _absent(name: str) -> None:
    raise ValueError(f"{name} is absent")


_BUILDING_MODELS: set[tuple[type, Descriptor]] = set()  # builders being made (a model may nest itself)


@cache
def _model_builder(model: type[BaseModel], desc: Descriptor) -> Callable[[Message], BaseModel]:
    """A function building `model` straight from a `desc` message, made once per pair with one
    line per field (as `_compiled` is the other way); raises _Unbuildable for a model it cannot."""
    if model.__private_attributes__ or model.__pydantic_post_init__:
        raise _Unbuildable(f"{model.__name__} sets itself up")
    names: dict[str, Any] = {"M": model, "_datetime": _datetime,
                             "_uuid_of": _uuid_of, "_build": _build, "absent": _absent,
                             "instance_of": instance_of}
    lines = ["def build(m):", "    has = m.HasField", "    out = {"]
    _BUILDING_MODELS.add((model, desc))
    try:
        for i, name, fd in _paired_fields(model, desc, _Unbuildable):
            lines.append(f"        {name!r}: {_field_code(model, name, fd, i, names)},")
        lines.append("    }")
    finally:
        _BUILDING_MODELS.discard((model, desc))
    if desc.full_name == _CONTENT_BLOCK:  # a text block's bytes travel as its text
        lines.append("    if not out['data'] and has('text'):\n        out['data'] = m.text.encode('utf-8')")
    lines.append("    return instance_of(M, out)")  # every field in order, as the lines above give them
    exec("\n".join(lines) + "\n", names)  # noqa: S102 - the code is made here, from field names
    function: Callable[[Message], BaseModel] = names["build"]
    return function


def _build(model: type[BaseModel], message: Message) -> BaseModel:
    return _model_builder(model, message.DESCRIPTOR)(message)


@cache
def _direct(model: type[BaseModel], desc: Descriptor) -> Callable[[Message], BaseModel] | None:
    """`_model_builder`, or None for a model it cannot make (asked once per pair)."""
    try:
        return _model_builder(model, desc)
    except _Unbuildable:
        return None


def message_to_json(message: Message, *, full: bool) -> dict[str, Any]:
    """CMP JSON of a message: `full` for responses, else only the fields that were given."""
    return _read_full(message) if full else _from_wire(message, False)


# ---------------------------------------------------------------- per operation


def _check(op: str, message: Message, cls: type[Message]) -> Message:
    if not isinstance(message, cls):
        raise TypeError(f"{op} expects {cls.DESCRIPTOR.full_name}, got {message.DESCRIPTOR.full_name}")
    return message


def to_proto(op: str, request: Mapping[str, Any] | None) -> Message:
    """A CMP request (JSON or the Python objects `dispatch` accepts) as the op's proto request."""
    return json_to_message(request or {}, request_class(op), context=op)


def from_proto_request(op: str, message: Message) -> dict[str, Any]:
    """The JSON `dispatch` takes for a proto request; absent fields are left to the defaults."""
    return message_to_json(_check(op, message, request_class(op)), full=False)


def to_proto_response(op: str, response: Mapping[str, Any] | BaseModel) -> Message:
    """The op's proto response for the model `Dispatcher.call` returned (or its JSON)."""
    if isinstance(response, BaseModel):
        return model_to_message(response, response_class(op))
    return json_to_message(response, response_class(op), context=op)


def from_proto_response(op: str, message: Message) -> dict[str, Any]:
    """Exactly the JSON `dispatch` returns, from the op's proto response."""
    return message_to_json(_check(op, message, response_class(op)), full=True)


def response_model(op: str, message: Message, model: type[M]) -> M:
    """`model` (the op's response model) built straight from the op's proto response, with no
    JSON between and (for an answer in the model's range) no second validation: what the typed
    client methods answer."""
    build = _direct(model, _check(op, message, response_class(op)).DESCRIPTOR)
    if build is not None:
        try:
            return cast(M, build(message))  # a `model`, made by its builder
        except (_Unbuildable, KeyError, ValueError):  # what the model would refuse: it says why
            pass
    return model.model_validate(_read_typed(message))


# ---------------------------------------------------------------- the schema, checked


def _is_map(fd: FieldDescriptor) -> bool:
    return fd.message_type is not None and fd.message_type.GetOptions().map_entry


def _unwrap(tp: Any) -> tuple[bool, Any]:
    """(may it be None, the type without Annotated/Optional)."""
    nullable = False
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(tp) if a is not type(None)]
            nullable = nullable or len(args) < len(get_args(tp))
            tp = args[0] if len(args) == 1 else Any
        else:
            return nullable or tp is Any, tp


_SCALARS: dict[type, set[int]] = {
    bool: {FieldDescriptor.TYPE_BOOL},
    int: {FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64},
    float: {FieldDescriptor.TYPE_DOUBLE},
    str: {FieldDescriptor.TYPE_STRING},
    uuid.UUID: {FieldDescriptor.TYPE_STRING},
    bytes: {FieldDescriptor.TYPE_BYTES},
}
_ZERO: dict[type, Any] = {bool: False, int: 0, float: 0.0, str: "", bytes: b""}


@dataclass
class _Schema:
    nullable: set[str] = field(default_factory=set)  # proto fields whose model field may be None
    problems: list[str] = field(default_factory=list)
    seen: set[tuple[type, bool]] = field(default_factory=set)

    def model(self, model: type[BaseModel], desc: Descriptor, request: bool) -> None:
        if (model, request) in self.seen:
            return
        self.seen.add((model, request))
        if message_class(model).DESCRIPTOR.full_name != desc.full_name:
            self.problems.append(f"{model.__name__} is carried by {desc.full_name}")
        for name, info in model.model_fields.items():
            fd = desc.fields_by_name.get(name)
            if fd is None:
                self.problems.append(f"{desc.name}.{name} is missing from the proto")
                continue
            nullable, tp = _unwrap(info.annotation)
            if nullable:
                self.nullable.add(fd.full_name)
                if not (fd.is_repeated or fd.has_presence or fd.enum_type):  # enums: UNSPECIFIED
                    self.problems.append(f"{desc.name}.{name} may be null: make it optional")
            if request and not info.is_required() and not nullable and tp in _ZERO \
                    and not fd.has_presence and info.get_default(call_default_factory=True) != _ZERO[tp]:
                self.problems.append(f"{desc.name}.{name} has a non-zero default: make it optional")
            self.field(tp, fd, f"{desc.name}.{name}", request)
        for fd in desc.fields:
            if fd.name not in model.model_fields and fd.full_name != _TEXT_ALIAS:
                self.problems.append(f"{desc.name}.{fd.name} is not a field of {model.__name__}")

    def field(self, tp: Any, fd: FieldDescriptor, where: str, request: bool) -> None:
        origin = get_origin(tp)
        if _is_map(fd):
            if origin is not dict:
                self.problems.append(f"{where}: a proto map for {tp}")
                return
            self.value(_unwrap(get_args(tp)[1])[1], fd.message_type.fields_by_name["value"], where, request)
        elif fd.is_repeated:
            args = get_args(tp)
            if not (origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis)):
                self.problems.append(f"{where}: a repeated field for {tp}")
                return
            self.value(_unwrap(args[0])[1], fd, where, request)
        else:
            self.value(tp, fd, where, request)

    def value(self, tp: Any, fd: FieldDescriptor, where: str, request: bool) -> None:
        proto = fd.message_type.full_name if fd.message_type else None
        if tp is Any or get_origin(tp) is dict:
            ok = proto in _JSON_TYPES
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            ok = proto is not None and proto not in _JSON_TYPES and proto != _TIMESTAMP
            if ok:
                self.model(tp, fd.message_type, request)
        elif isinstance(tp, type) and issubclass(tp, Enum):
            ok = fd.enum_type is not None and enum_values(fd.enum_type) == [e.value for e in tp]
        elif tp is datetime:
            ok = proto == _TIMESTAMP
        else:
            ok = fd.type in _SCALARS.get(tp, set())
        if not ok:
            self.problems.append(f"{where}: {fd.full_name} cannot carry {tp}")


@cache
def _schema() -> _Schema:
    schema = _Schema()
    for op in OPERATIONS.values():
        schema.model(op.request, message_class(op.request).DESCRIPTOR, True)
        schema.model(op.response, message_class(op.response).DESCRIPTOR, False)
    return schema


def schema_problems() -> list[str]:
    """Where the proto and the pydantic models disagree (empty when they mirror each other)."""
    return list(_schema().problems)
