"""Transports: thin skins over the one CMP dispatcher (HTTP, gRPC, MCP) and the HTTP client."""
