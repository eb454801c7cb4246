"""Argon2id cost parameters and the most cost a reader accepts.

Kept apart from the cipher code so that configuration can name the limits without loading
hashlib and the archive format.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KdfParams:
    """Argon2id cost parameters (RFC 9106's second recommended set by default)."""

    time_cost: int = 3
    memory_cost_kib: int = 64 * 1024
    parallelism: int = 1


DEFAULT_KDF = KdfParams()


@dataclass(frozen=True)
class KdfLimits:
    """The most Argon2id cost a reader accepts. The cost is chosen by whoever wrote the archive, so
    without a cap a few hundred bytes could make the importer allocate a gigabyte and spin for
    half a minute. The defaults admit four times the memory and about three times the passes of
    what `DEFAULT_KDF` writes."""

    memory_cost_kib: int = 256 * 1024
    time_cost: int = 8
    parallelism: int = 4


DEFAULT_LIMITS = KdfLimits()
# The widest cost any configuration may admit (and the bounds of a data directory's key file).
CEILING = KdfLimits(memory_cost_kib=1024 * 1024, time_cost=16, parallelism=16)

# The setting that raises each limit, named in the error that refuses an archive.
LIMIT_SETTINGS = {"memory_cost_kib": "archive.import_max_kdf_memory_kib",
                  "time_cost": "archive.import_max_kdf_time_cost",
                  "parallelism": "archive.import_max_kdf_parallelism"}


def over_limit(params: KdfParams, limits: KdfLimits) -> tuple[str, int, int] | None:
    """(parameter, value, limit) of the first cost above `limits`, or None when all are within."""
    for name in ("memory_cost_kib", "time_cost", "parallelism"):
        value, limit = getattr(params, name), getattr(limits, name)
        if value > limit:
            return name, value, limit
    return None


def valid_cost(params: KdfParams) -> bool:
    """Whether Argon2id can run with `params` at all (at least one pass, one lane, 8 KiB a lane)."""
    return params.time_cost >= 1 and params.parallelism >= 1 and params.memory_cost_kib >= 8 * params.parallelism
