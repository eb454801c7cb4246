"""Configuration: one table of settings, read from flags > environment > TOML file > defaults.

Each `Setting` describes itself (name, default, help), so validation, `cerememory config show`
and the docs come from the same place. TOML keys are dotted by section (`[embed] semantic`
is `embed.semantic`); the environment variable is `CEREMEMORY_` + the name upper-cased with
`.` replaced by `__` (`CEREMEMORY_EMBED__SEMANTIC`), except `data_dir` (`CEREMEMORY_DATA_DIR`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cmp.errors import CMPError, ErrorCode
from .env_names import env_name

if TYPE_CHECKING:
    from .storage.backends import StorageSettings

DEFAULT_HOME = Path("~/.cerememory")


def _choice(*options: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = str(value).strip().lower()
        if text not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {value!r}")
        return text

    return parse


def _positive_int(value: Any) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(f"must be at least 1, got {number}")
    return number


def _port(value: Any) -> int:
    number = int(value)
    if not 0 < number < 65536:
        raise ValueError(f"must be a port number (1-65535), got {number}")
    return number


def _optional_str(value: Any) -> str | None:
    text = str(value).strip() if value is not None else ""
    return text or None


def _path(value: Any) -> str:
    return str(Path(str(value)).expanduser())


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _names(value: Any) -> tuple[str, ...]:
    """A comma-separated setting (or a TOML array) as a tuple of non-blank entries."""
    items = value if isinstance(value, list | tuple) else str(value or "").split(",")
    return tuple(text for text in (str(item).strip() for item in items) if text)


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    parse: Callable[[Any], Any]
    help: str
    secret: bool = False

    @property
    def env(self) -> str:
        return env_name(self.name)


SETTINGS: tuple[Setting, ...] = (
    Setting("data_dir", str(DEFAULT_HOME / "data"), _path,
            "Directory holding the database, indexes and lock file."),
    Setting("server_url", None, _optional_str,
            "URL of a running `cerememory serve`; CLI commands talk to it instead of opening data_dir."),
    Setting("server_api_key", None, _optional_str, "Bearer key sent to server_url.", secret=True),
    Setting("auth.api_keys", None, _optional_str,
            "Comma-separated bearer keys `cerememory serve` accepts; required off loopback.", secret=True),
    Setting("encryption.passphrase", None, _optional_str,
            "Passphrase of an encrypted data directory (`cerememory init --encrypt`); prefer the environment.",
            secret=True),
    Setting("encryption.passphrase_file", None, _optional_str,
            "File whose first line is the passphrase, when encryption.passphrase is unset (a container or "
            "orchestrator secret: every server of a shared memory reads the same one)."),
    Setting("storage.backend", "duckdb", _choice("duckdb", "postgres"),
            "System of record: duckdb (embedded, in data_dir) or postgres (shared by several servers; "
            "docs/scale-out.md)."),
    Setting("storage.postgres_url", None, _optional_str,
            "PostgreSQL URL for storage.backend = postgres; PG* variables, PGPASSFILE and sslmode apply as in psql.",
            secret=True),
    Setting("storage.namespace", "cerememory", str,
            "PostgreSQL schema holding this memory: servers with the same namespace share one memory."),
    Setting("memory.working_capacity", 7, _positive_int,
            "Records the working memory holds before it evicts the least recently used."),
    Setting("recall.fusion", "normalized", _choice("rrf", "normalized"),
            "How BM25 and cosine rankings are combined: reciprocal rank fusion or each divided by its "
            "best score (chosen by cross-validation on LoCoMo, bench/locomo.py --cv)."),
    Setting("recall.rrf_k", 5, _positive_int,
            "The k constant of reciprocal rank fusion (chosen by cross-validation on LoCoMo, "
            "bench/locomo.py --cv)."),
    Setting("recall.activation_seeds", 3, _positive_int,
            "How many top results spread activation to associated memories."),
    Setting("embed.semantic", "auto", _choice("auto", "on", "off"),
            "Semantic (vector) search: auto = on when the backend can embed offline."),
    Setting("embed.backend", "local", _choice("local", "http", "none"),
            "Embedding backend: local all-MiniLM-L6-v2, an HTTP service, or none."),
    Setting("embed.model", "all-MiniLM-L6-v2", str,
            "Model name (local model, or the remote model for http)."),
    Setting("embed.http_url", None, _optional_str,
            "Base URL of an OpenAI-compatible /v1/embeddings or Ollama /api/embed service."),
    Setting("embed.http_kind", "openai", _choice("openai", "ollama"), "Protocol of embed.http_url."),
    Setting("embed.http_api_key", None, _optional_str, "Bearer key for embed.http_url.", secret=True),
    Setting("embed.batch_size", 64, _positive_int, "Texts per embedding call."),
    Setting("http.host", "127.0.0.1", str, "Address `cerememory serve` binds."),
    Setting("http.port", 8420, _port, "HTTP port of `cerememory serve`."),
    Setting("http.allowed_hosts", (), _names,
            "Extra names the server answers to in the Host header (comma-separated; `*` turns the check off). "
            "Loopback names and the bound address are always allowed."),
    Setting("http.allowed_origins", (), _names,
            "Web origins (scheme://host:port) whose browser requests are accepted besides the server's own "
            "(comma-separated; `*` accepts any)."),
    Setting("grpc.port", None, lambda v: _port(v) if v not in (None, "") else None,
            "gRPC port of `cerememory serve` (off when unset)."),
    Setting("grpc.tls_cert", None, _optional_str,
            "PEM certificate chain for gRPC (required off loopback; needs grpc.port)."),
    Setting("grpc.tls_key", None, _optional_str, "PEM private key for gRPC (with grpc.tls_cert)."),
)

def _nonnegative_int(value: Any) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(f"must be 0 or more, got {number}")
    return number


def _positive_float(value: Any) -> float:
    number = float(value)
    if not number > 0 or number != number or number == float("inf"):
        raise ValueError(f"must be a positive number, got {value!r}")
    return number


def _unit_float(value: Any) -> float:
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"must be between 0 and 1, got {value!r}")
    return number


def _decay_settings() -> tuple[Setting, ...]:
    from .dynamics.params import DEFAULT_PARAMS

    meaning = {
        "exponent": ("the power-law exponent d", _positive_float),
        "stability": ("initial stability S in seconds (the time scale of the curve)", _positive_float),
        "prune": ("fidelity below which a record is forgotten (hidden from recall)", _unit_float),
        "boost": ("retrieval boost b: S grows by a factor 1 + b·S^-0.2 on each recall", _positive_float),
        "interference": ("how fast noise gathers as fidelity falls", _unit_float),
    }
    return tuple(
        Setting(f"decay.{store}.{name}", getattr(params, name), parse, f"{store}: {text}")
        for store, params in DEFAULT_PARAMS.items() for name, (text, parse) in meaning.items()
    )


SETTINGS = SETTINGS + (
    Setting("decay.interval_seconds", 3600, _nonnegative_int,
            "How often `cerememory serve` runs a decay tick in the background (0 turns it off)."),
) + _decay_settings() + (
    Setting("evolution.frozen", False, _bool,
            "Freeze the evolution engine: it keeps observing but changes no decay parameter."),
    Setting("evolution.interval_seconds", 86400, _positive_float,
            "Least time between two rounds of parameter adjustments (checked at each decay tick)."),
)


def _nonnegative_float(value: Any) -> float:
    number = float(value)
    if not number >= 0 or number == float("inf"):
        raise ValueError(f"must be 0 or more, got {value!r}")
    return number


def _patterns(value: Any) -> tuple[str, ...]:
    if not value:  # the default: no need to load the sanitizer, which compiles its patterns
        return ()
    from .security.sanitize import parse_patterns

    return parse_patterns(value)


SETTINGS = SETTINGS + (
    Setting("recall.text_weight", 1.5, _positive_float,
            "Weight of the BM25 ranking against the cosine ranking (weight 1) when they are fused."),
    Setting("recall.activation_weight", 1.5, _nonnegative_float,
            "How much spreading activation from the top results (e.g. the neighbouring turns of a "
            "session) adds to a memory's score; 0 turns it off."),
    Setting("recall.question_cleanup", False, _bool,
            "Drop question words (what, when, did, how many...) from the BM25 query of a cue."),
    Setting("recall.temporal_weight", 1.0, _nonnegative_float,
            "How much a time the cue names (\"in May 2023\", \"last week\") favours memories whose "
            "event time falls in it; 0 turns it off."),
    Setting("recall.session_weight", 0.1, _nonnegative_float,
            "How much the other hits from a hit's conversation session (context.session_id) add to "
            "it: a session many hits come from is evidence for each of them; 0 turns it off."),
    Setting("recall.context_weight", 0.5, _nonnegative_float,
            "The vote, in fusion, of the cue's cosine to each hit in its session context (its vector "
            "plus 0.3 times each neighbouring turn's); 0 turns it off."),
    Setting("recall.text_context_weight", 1.0, _nonnegative_float,
            "The vote, in fusion, of BM25 in session context: each hit and its neighbouring turns "
            "scored by their own BM25 plus 0.3 times their neighbours' (as if each turn were "
            "indexed with the turns around it); 0 turns it off."),
    Setting("recall.feedback", "off", _choice("off", "vector", "text"),
            "Pseudo-relevance feedback: a second search from the best first hits (their mean vector "
            "added to the cue's, or the words at least two of them share added to the cue)."),
)

SETTINGS = SETTINGS + (
    Setting("audit.enabled", True, _bool,
            "Append every mutating operation to the hash-chained audit log (data_dir/audit.jsonl)."),
    Setting("audit.allow_broken", False, _bool,
            "Start even when the audit chain is broken: the broken log is kept aside and a new one "
            "starts with an entry recording this (`serve --allow-broken-audit`)."),
    Setting("audit.fsync_interval", 1.0, _nonnegative_float,
            "Seconds between fsyncs of the audit log while it is being appended to (0: every entry)."),
    Setting("ratelimit.enabled", "auto", _choice("auto", "on", "off"),
            "Per-client token bucket on HTTP and gRPC; auto = on when `serve` binds off loopback."),
    Setting("ratelimit.rate", 100.0, _positive_float,
            "Requests per second each API key (or anonymous client address) may sustain."),
    Setting("ratelimit.burst", 50, _positive_int, "Requests a client may send at once before it is limited."),
    Setting("ratelimit.trusted_proxies", None, _optional_str,
            "Comma-separated proxy addresses or CIDRs whose X-Forwarded-For is believed."),
    Setting("auth.failure_rate", 0.2, _positive_float,
            "Failed authentications per second a client address may sustain before it gets 429 instead of 401."),
    Setting("auth.failure_burst", 20, _positive_int,
            "Failed authentications a client address may make at once before auth.failure_rate applies."),
    Setting("sanitize.extra_patterns", (), _patterns,
            "Extra secret regexes redacted as [REDACTED] (TOML array, or a JSON array in the environment)."),
    Setting("log.format", "text", _choice("text", "json"),
            "Server log lines on stderr: text, or one JSON object per line (`serve --log-format`)."),
)


SETTINGS = SETTINGS + (
    Setting("dream.background_enabled", True, _bool,
            "Whether `cerememory serve` dreams in the background (see dream.background_interval_secs)."),
    Setting("dream.background_interval_secs", 86400, _positive_float,
            "Seconds between background dream ticks of `cerememory serve`."),
    Setting("dream.background_max_groups", 50, _positive_int, "Topic groups one background dream tick processes."),
    Setting("dream.summary_max_chars", 1200, _positive_int, "Size cap of a dream summary, in characters."),
    Setting("llm.provider", "none", _choice("none", "openai", "anthropic", "gemini"),
            "LLM for dream summaries (openai = any OpenAI-compatible chat completions API); none = extractive."),
    Setting("llm.model", None, _optional_str, "Model name (default per provider)."),
    Setting("llm.base_url", None, _optional_str, "API base URL (default: the provider's public endpoint)."),
    Setting("llm.api_key", None, _optional_str, "API key for llm.provider.", secret=True),
    Setting("llm.timeout_secs", 30.0, _positive_float, "Seconds before one LLM request times out."),
    Setting("llm.max_retries", 2, _nonnegative_int, "Retries after a timeout, 429 or 5xx (exponential backoff)."),
    Setting("llm.max_tokens", 300, _positive_int, "Most tokens one LLM summary may use."),
    Setting("llm.daily_token_budget", 200000, _nonnegative_int,
            "Tokens the LLM may use per UTC day (0: no limit); past it, summaries are extractive."),
    Setting("llm.daily_cost_budget_usd", 0.0, _nonnegative_float, "Spend per UTC day in USD (0: no limit)."),
    Setting("llm.usd_per_million_tokens", 0.0, _nonnegative_float,
            "Price used to count llm.daily_cost_budget_usd."),
)

def _agent_list(value: Any) -> tuple[str, ...]:
    """Agent names (comma-separated or a TOML array) for the ingest privacy switch."""
    from .ingest.names import AGENTS, canonical

    items = value if isinstance(value, list | tuple) else str(value or "").split(",")
    names: list[str] = []
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        name = canonical(item)
        if name is None:
            raise ValueError(f"unknown agent {item!r} (known: {', '.join(AGENTS)})")
        names.append(name)
    return tuple(dict.fromkeys(names))


SETTINGS = SETTINGS + (
    Setting("ingest.agents", (), _agent_list,
            "Agents whose sessions `cerememory ingest` may read (comma-separated: claude_code, codex, gemini, "
            "cursor, aider, pi); empty = all."),
    Setting("ingest.exclude_agents", (), _agent_list,
            "Agents whose sessions are never ingested (wins over ingest.agents)."),
    Setting("ingest.max_tool_chars", 16000, _nonnegative_int,
            "Tool inputs and outputs longer than this are cut to their head and tail with a marker (0: no cap)."),
    Setting("ingest.interval_seconds", 30.0, _positive_float, "Seconds between passes of `cerememory ingest --watch`."),
    Setting("ingest.state_dir", None, lambda v: _path(v) if v not in (None, "") else None,
            "Where ingest remembers how far each session file was read (default: `ingest/` beside data_dir)."),
)


def _int_between(low: int, high: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        number = int(value)
        if not low <= number <= high:
            raise ValueError(f"must be between {low} and {high}, got {number}")
        return number

    return parse


def _archive_settings() -> tuple[Setting, ...]:
    from .storage.kdf import CEILING, DEFAULT_LIMITS

    limits = DEFAULT_LIMITS
    return (
        Setting("archive.import_max_kdf_memory_kib", limits.memory_cost_kib, _int_between(8, CEILING.memory_cost_kib),
                "Most Argon2id memory (KiB) an encrypted archive may ask its importer for; a costlier one is "
                "refused before any key is derived (exports write 65536)."),
        Setting("archive.import_max_kdf_time_cost", limits.time_cost, _int_between(1, CEILING.time_cost),
                "Most Argon2id passes an encrypted archive may ask for (exports write 3)."),
        Setting("archive.import_max_kdf_parallelism", limits.parallelism, _int_between(1, CEILING.parallelism),
                "Most Argon2id lanes (threads) an encrypted archive may ask for (exports write 1)."),
        Setting("archive.import_wait_seconds", 5.0, _nonnegative_float,
                "How long an import waits for the one running before it is refused with RATE_LIMITED (imports "
                "run one at a time)."),
        Setting("archive.export_dir", None, lambda v: _path(v) if v not in (None, "") else None,
                "The only directory the MCP `export` tool of `cerememory serve` writes into (default: `exports/` "
                "in data_dir)."),
    )


SETTINGS = SETTINGS + _archive_settings() + (
    Setting("mcp.stream_max_seconds", 60.0, _positive_float,
            "Longest a `GET /mcp` event stream stays open before `cerememory serve` ends it (the stateless "
            "endpoint sends nothing on it)."),
)

BY_NAME = {s.name: s for s in SETTINGS}
SOURCE_DEFAULT = "default"
SOURCE_FLAG = "flag"


def default_config_path() -> Path:
    return Path(os.environ.get("CEREMEMORY_CONFIG", str(DEFAULT_HOME / "config.toml"))).expanduser()


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


class Config:
    """Effective settings with the source of each value."""

    def __init__(self, values: dict[str, Any], sources: dict[str, str], path: Path | None) -> None:
        self._values = values
        self._sources = sources
        self.path = path

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def source(self, name: str) -> str:
        return self._sources[name]

    def items(self) -> list[tuple[Setting, Any, str]]:
        return [(s, self._values[s.name], self._sources[s.name]) for s in SETTINGS]

    @property
    def data_dir(self) -> Path:
        return Path(self["data_dir"])

    def decay_params(self) -> dict[Any, Any]:
        from .dynamics.decay import DEFAULT_PARAMS, DecayParams

        return {store: DecayParams(**{n: self[f"decay.{store.value}.{n}"] for n in DecayParams.names()})
                for store in DEFAULT_PARAMS}

    def archive_settings(self) -> Any:
        from .storage.archive_settings import ArchiveSettings
        from .storage.kdf import KdfLimits

        return ArchiveSettings(
            kdf_limits=KdfLimits(memory_cost_kib=self["archive.import_max_kdf_memory_kib"],
                                 time_cost=self["archive.import_max_kdf_time_cost"],
                                 parallelism=self["archive.import_max_kdf_parallelism"]),
            import_wait_seconds=self["archive.import_wait_seconds"],
            export_dir=self["archive.export_dir"],
        )

    def passphrase(self) -> str | None:
        """encryption.passphrase, else the first line of encryption.passphrase_file."""
        given = self["encryption.passphrase"]
        path = self["encryption.passphrase_file"]
        if given or not path:
            return given
        try:
            lines = Path(path).expanduser().read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"encryption.passphrase_file: cannot read {path}: {exc}",
                           hint="point CEREMEMORY_PASSPHRASE_FILE at a readable file whose first line is "
                                "the passphrase") from None
        return lines[0] if lines and lines[0] else None

    def storage_settings(self) -> StorageSettings:
        from .storage.backends import StorageSettings

        return StorageSettings(backend=self["storage.backend"], postgres_url=self["storage.postgres_url"],
                               namespace=self["storage.namespace"])

    def engine_options(self) -> dict[str, Any]:
        from .dream.settings import DreamSettings
        from .embed import EmbedSettings
        from .llm.settings import LLMSettings

        return {
            "storage": self.storage_settings(),
            "working_capacity": self["memory.working_capacity"],
            "fusion": self["recall.fusion"],
            "rrf_k": self["recall.rrf_k"],
            "activation_seeds": self["recall.activation_seeds"],
            "text_weight": self["recall.text_weight"],
            "activation_weight": self["recall.activation_weight"],
            "question_cleanup": self["recall.question_cleanup"],
            "temporal_weight": self["recall.temporal_weight"],
            "session_weight": self["recall.session_weight"],
            "context_weight": self["recall.context_weight"],
            "text_context_weight": self["recall.text_context_weight"],
            "feedback": self["recall.feedback"],
            "audit": self["audit.enabled"],
            "allow_broken_audit": self["audit.allow_broken"],
            "audit_fsync_interval": self["audit.fsync_interval"],
            "decay": self.decay_params(),
            "passphrase": self.passphrase(),
            "sanitize_patterns": self["sanitize.extra_patterns"],
            "evolution_frozen": self["evolution.frozen"],
            "evolution_interval": self["evolution.interval_seconds"],
            "dream": DreamSettings(
                background_enabled=self["dream.background_enabled"],
                background_interval_secs=self["dream.background_interval_secs"],
                background_max_groups=self["dream.background_max_groups"],
                summary_max_chars=self["dream.summary_max_chars"],
            ),
            "llm": LLMSettings(**{name: self[f"llm.{name}"] for name in (
                "provider", "model", "base_url", "api_key", "timeout_secs", "max_retries", "max_tokens",
                "daily_token_budget", "daily_cost_budget_usd", "usd_per_million_tokens")}),
            "archive": self.archive_settings(),
            "embed": EmbedSettings(
                semantic=self["embed.semantic"],
                backend=self["embed.backend"],
                model=self["embed.model"],
                http_url=self["embed.http_url"],
                http_kind=self["embed.http_kind"],
                http_api_key=self["embed.http_api_key"],
                batch_size=self["embed.batch_size"],
            ),
        }


def _parse(setting: Setting, value: Any, origin: str) -> Any:
    try:
        return setting.parse(value) if value is not None else None
    except (ValueError, TypeError) as exc:
        raise CMPError(
            ErrorCode.VALIDATION_ERROR,
            f"setting {setting.name} from {origin}: {exc}",
            hint=setting.help,
            details={"setting": setting.name, "source": origin},
        ) from None


def load_config(
    config_path: str | Path | None = None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Merge defaults, the TOML file, `CEREMEMORY_*` variables and flags (highest wins)."""
    environ = os.environ if environ is None else environ
    explicit = config_path is not None
    path = Path(config_path).expanduser() if config_path is not None else default_config_path()
    file_values: dict[str, Any] = {}
    if path.exists():
        import tomllib  # only a config file needs the parser

        try:
            file_values = _flatten(tomllib.loads(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"cannot read config file {path}: {exc}",
                           hint="fix the TOML syntax or pass another --config") from None
        unknown = sorted(set(file_values) - set(BY_NAME))
        if unknown:
            raise CMPError(
                ErrorCode.VALIDATION_ERROR,
                f"unknown setting {unknown[0]!r} in {path}",
                hint="`cerememory config show` lists every setting",
                details={"unknown": unknown},
            )
    elif explicit:
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"config file {path} does not exist",
                       hint="create it or leave out --config")

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for setting in SETTINGS:
        value, source = setting.default, SOURCE_DEFAULT
        if setting.name in file_values:
            value, source = file_values[setting.name], f"file:{path}"
        if setting.env in environ and environ[setting.env] != "":
            value, source = environ[setting.env], f"env:{setting.env}"
        if flags and flags.get(setting.name) is not None:
            value, source = flags[setting.name], SOURCE_FLAG
        values[setting.name] = _parse(setting, value, source)
        sources[setting.name] = source
    return Config(values, sources, path if path.exists() else None)
