"""Persistence: the DuckDB system of record, the msgpack codec and the data-dir lock."""
