"""The OpenAPI document of the HTTP transport: what FastAPI cannot derive by itself.

Bodies are parsed by the transport (so that every failure is a CMP envelope), which leaves
FastAPI unaware of the request models; their schemas are added here, each nested model a
component so that every `$ref` resolves. Every route documents the error statuses it may answer,
with the envelope's schema.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from ..cmp.errors import HTTP_STATUS, WHEN, ErrorCode
from ..cmp.operations import Route

COMPONENTS = "#/components/schemas/"
ENVELOPE = "CMPError"
ENVELOPE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": ENVELOPE,
    "required": ["code", "message"],
    "properties": {
        "code": {"type": "string", "enum": [code.value for code in ErrorCode]},
        "message": {"type": "string"},
        "details": {"anyOf": [{"type": "object"}, {"type": "null"}]},
        "retry_after": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "request_id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
}


def error_responses() -> dict[int | str, dict[str, Any]]:
    """Every error status any route may answer, each with the codes behind it."""
    by_status: dict[int, list[ErrorCode]] = {}
    for code, status in HTTP_STATUS.items():
        by_status.setdefault(status, []).append(code)
    by_status.setdefault(404, [])  # an unknown route
    return {
        status: {
            "description": "; ".join(f"`{c.value}`: {WHEN[c]}" for c in codes) or "no such route",
            "content": {"application/json": {"schema": {"$ref": COMPONENTS + ENVELOPE}}},
        }
        for status, codes in sorted(by_status.items())
    }


def request_schemas(models: list[type[BaseModel]]) -> tuple[dict[type[BaseModel], dict[str, Any]], dict[str, Any]]:
    """Each model's `$ref`, and the component schemas they (and everything they nest) need."""
    refs, schema = models_json_schema([(model, "validation") for model in models],
                                      ref_template=COMPONENTS + "{model}")
    return {cast(type[BaseModel], model): ref for (model, _), ref in refs.items()}, schema.get("$defs", {})


def request_body(route: Route, ref: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """The route's path parameters and request body. A body whose fields are all optional may be
    left out (`POST /v1/lifecycle/decay-tick` with no body is `{}`); a field the path carries is
    not asked for in the body (the path wins)."""
    extra: dict[str, Any] = {}
    if route.path_params:
        extra["parameters"] = [{"name": name, "in": "path", "required": True,
                                "schema": {"type": "string", "format": "uuid"}} for name in route.path_params]
    if route.method == "GET":
        return extra
    schema = components[ref["$ref"][len(COMPONENTS):]]
    if route.path_params:
        properties = {k: v for k, v in schema.get("properties", {}).items() if k not in route.path_params}
        required = [k for k in schema.get("required", []) if k not in route.path_params]
        schema = {key: value for key, value in schema.items() if key != "required"} | {"properties": properties}
        if required:
            schema["required"] = required
        ref = schema
    extra["requestBody"] = {"required": bool(schema.get("required")),
                            "content": {"application/json": {"schema": ref}}}
    return extra


def install(app: FastAPI, components: dict[str, Any]) -> None:
    """Make `app.openapi()` add the request components and the envelope to FastAPI's document."""

    def build() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version, description=app.description,
                                   routes=app.routes)
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            clashes = {name for name, schema in components.items() if schemas.get(name, schema) != schema}
            renamed = _renamed(clashes)
            schemas.update(_retarget({renamed.get(n, n): s for n, s in components.items()}, renamed))
            schemas[ENVELOPE] = ENVELOPE_SCHEMA
            secure(document)
            app.openapi_schema = _retarget(document, renamed, only="requestBody")
        return app.openapi_schema

    openapi: Callable[[], dict[str, Any]] = build
    app.openapi = openapi  # type: ignore[method-assign]


BEARER = "bearerKey"


def secure(document: dict[str, Any]) -> None:
    """Declare the bearer key (Swagger UI's "Authorize" button) on every CMP route, as optional
    (`{}`): a server started without keys needs none. The probes and the docs never do."""
    document["components"]["securitySchemes"] = {BEARER: {
        "type": "http", "scheme": "bearer",
        "description": "an API key (`cerememory keys create`); needed when the server has keys"}}
    for path, methods in document.get("paths", {}).items():
        if path.startswith("/v1/"):
            for operation in methods.values():
                operation["security"] = [{BEARER: []}, {}]


def _renamed(names: set[str]) -> dict[str, str]:
    """A request model whose response schema differs (a JSON reader gets more fields back) is
    named `<Model>-Input`, as FastAPI names its own input schemas."""
    return {name: f"{name}-Input" for name in names}


def _retarget(value: Any, renamed: dict[str, str], *, only: str | None = None, inside: bool = False) -> Any:
    """`value` with every `$ref` to a renamed component pointing at its new name (under keys
    named `only` when given, where the request schemas are)."""
    if not renamed:
        return value
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            within = inside or only is None or key == only
            if key == "$ref" and within and isinstance(item, str) and item.startswith(COMPONENTS):
                name = item[len(COMPONENTS):]
                item = COMPONENTS + renamed.get(name, name)
            out[key] = _retarget(item, renamed, only=only, inside=within)
        return out
    if isinstance(value, list):
        return [_retarget(item, renamed, only=only, inside=inside) for item in value]
    return value
