"""Transports: thin skins over the one CMP dispatcher, built from the operation table (HTTP, gRPC,
MCP), the serving process (`server`), and the clients (HTTP, gRPC, the standard-library one)."""
