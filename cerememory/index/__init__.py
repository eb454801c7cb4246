"""Derived indexes: full text (tantivy), vectors (numpy), associations (numpy columns)."""
