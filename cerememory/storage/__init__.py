"""Persistence: the storage seam (`base.py`) and its DuckDB backend (`duckdb/`), the msgpack codec,
encryption at rest, the data-directory lock, and the CMA archive format."""
