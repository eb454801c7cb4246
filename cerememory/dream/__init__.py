"""Dream processing: the raw journal becomes episodic summaries and semantic facts, with
backlinks both ways and redaction by visibility and secrecy (see docs/dream.md)."""

from __future__ import annotations

from .grouping import Group, group_records
from .pipeline import run, sources_of, stats
from .settings import DreamSettings
from .summarise import Summariser, Summary

__all__ = ["DreamSettings", "Group", "Summariser", "Summary", "group_records", "run", "sources_of", "stats"]
