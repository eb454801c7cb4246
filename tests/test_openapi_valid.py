"""The OpenAPI document is valid OpenAPI 3.1 (openapi-spec-validator), declares every path
parameter, and offers the bearer key to Swagger UI's "Authorize" button."""

from __future__ import annotations

import httpx
from openapi_spec_validator import validate


def test_the_api_document_is_valid_and_declares_the_bearer_key(http_server):
    document = httpx.get(f"{http_server.url}/openapi.json", timeout=60).json()
    validate(document)
    for path, methods in document["paths"].items():
        declared = {p["name"] for op in methods.values() for p in op.get("parameters", []) if p["in"] == "path"}
        assert declared == {part[1:-1] for part in path.split("/") if part.startswith("{")}, path
        if path.startswith("/v1/"):
            assert all(op["security"] == [{"bearerKey": []}, {}] for op in methods.values()), path
    assert document["components"]["securitySchemes"]["bearerKey"] == {
        "type": "http", "scheme": "bearer",
        "description": "an API key (`cerememory keys create`); needed when the server has keys"}
    assert "security" not in document["paths"]["/health"]["get"]


def test_the_api_docs_are_served_from_the_package(http_server):
    with httpx.Client(base_url=http_server.url) as h:
        for page, asset in (("/docs", "/ui/static/vendor/swagger-ui-bundle.js"),
                            ("/redoc", "/ui/static/vendor/redoc.standalone.js")):
            answer = h.get(page)
            assert answer.status_code == 200 and asset in answer.text
            assert "script-src 'self';" in answer.headers["content-security-policy"]
            assert "cdn" not in answer.text.lower() and "https://" not in answer.text
            assert h.get(asset).status_code == 200
