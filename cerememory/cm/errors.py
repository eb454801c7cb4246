"""cm's error codes, their exit-code categories and default recovery hints (reference §1.3)."""

from __future__ import annotations

from typing import Any

CATEGORY_EXIT = {"internal": 1, "user_input": 2, "configuration": 3, "filesystem": 4,
                 "network": 5, "cass": 6, "llm": 7}

CODE_CATEGORY = {
    "INVALID_INPUT": "user_input", "MISSING_REQUIRED": "user_input", "BULLET_NOT_FOUND": "user_input",
    "SESSION_NOT_FOUND": "user_input", "ALREADY_EXISTS": "user_input", "VALIDATION_FAILED": "user_input",
    # TRAUMA_NOT_FOUND is unmapped, so internal (exit 1), as in the reference
    "PLAYBOOK_NOT_FOUND": "configuration", "PLAYBOOK_CORRUPT": "configuration",
    "CONFIG_INVALID": "configuration", "SEMANTIC_SEARCH_UNAVAILABLE": "configuration",
    "SANITIZATION_FAILED": "configuration",
    "FILE_NOT_FOUND": "filesystem", "FILE_PERMISSION_DENIED": "filesystem",
    "FILE_WRITE_FAILED": "filesystem", "LOCK_ACQUISITION_FAILED": "filesystem",
    "NETWORK_ERROR": "network", "SERVER_UNREACHABLE": "network",
    "UNAUTHORIZED": "configuration",
    "CASS_NOT_FOUND": "cass", "CASS_INDEX_STALE": "cass", "CASS_SEARCH_FAILED": "cass",
    "MISSING_API_KEY": "llm", "LLM_API_ERROR": "llm", "LLM_RATE_LIMITED": "llm",
    "LLM_BUDGET_EXCEEDED": "llm",
    "REFLECTION_FAILED": "internal", "AUDIT_FAILED": "internal", "INTERNAL_ERROR": "internal",
    "UNKNOWN_ERROR": "internal",
}

DEFAULT_RECOVERY = {
    "INVALID_INPUT": ["Check the command's arguments: cm <command> --help"],
    "MISSING_REQUIRED": ["Provide the missing argument or flag: cm <command> --help"],
    "BULLET_NOT_FOUND": ["List rules with: cm playbook list", "Find similar rules with: cm similar \"<text>\""],
    "TRAUMA_NOT_FOUND": ["List traumas with: cm trauma list"],
    "SESSION_NOT_FOUND": ["Check the session id or path"],
    "ALREADY_EXISTS": ["Use --force to overwrite (a backup is kept)"],
    "VALIDATION_FAILED": ["Fix the reported problems and retry"],
    "PLAYBOOK_NOT_FOUND": ["Initialise with: cm init"],
    "PLAYBOOK_CORRUPT": ["Check the YAML syntax of the playbook", "Run: cm doctor --fix"],
    "CONFIG_INVALID": ["Check config.json syntax", "Run: cm doctor"],
    "FILE_NOT_FOUND": ["Check the path exists"],
    "FILE_PERMISSION_DENIED": ["Check file permissions"],
    "FILE_WRITE_FAILED": ["Check disk space and permissions"],
    "LOCK_ACQUISITION_FAILED": ["Another process owns the Cerememory data dir: start `cerememory serve` "
                                "there and pass --server-url, or wait for it to finish"],
    "NETWORK_ERROR": ["Check that the Cerememory server is running (cerememory serve)",
                      "Check --server-url / CEREMEMORY_SERVER_URL"],
    "SERVER_UNREACHABLE": ["Start the server (cerememory serve) or check --server-url / CEREMEMORY_SERVER_URL",
                           "Or drop --server-url to open the data dir in-process"],
    "UNAUTHORIZED": ["Give cm the server's key: CEREMEMORY_SERVER_API_KEY=<key>, or server_api_key in "
                     "Cerememory's config"],
    "MISSING_API_KEY": ["Configure an LLM provider for Cerememory (llm.provider and its API key)"],
    "LLM_API_ERROR": ["Retry later; check the provider's status and your API key"],
    "LLM_BUDGET_EXCEEDED": ["Wait for the budget window to reset, or raise the budget"],
    "INTERNAL_ERROR": ["Retry with --verbose and report the problem"],
}


class CmError(Exception):
    """A cm failure that becomes the error envelope and the process exit code."""

    def __init__(self, code: str, message: str, *, recovery: list[str] | None = None,
                 hint: str | None = None, details: dict[str, Any] | None = None,
                 cause: str | None = None, retryable: bool | None = None, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.recovery = recovery if recovery is not None else DEFAULT_RECOVERY.get(code, [])
        self.hint = hint
        self.details = details
        self.cause = cause
        self.retryable = retryable
        self.forced_exit = exit_code  # where the reference exits otherwise than the code's category

    @property
    def exit_code(self) -> int:
        if self.forced_exit is not None:
            return self.forced_exit
        return CATEGORY_EXIT[CODE_CATEGORY.get(self.code, "internal")]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.message, "code": self.code, "exitCode": self.exit_code,
                               "recovery": list(self.recovery)}
        for key, value in (("cause", self.cause), ("hint", self.hint), ("retryable", self.retryable),
                           ("details", self.details)):
            if value is not None:
                out[key] = value
        return out


def invalid(message: str, **kw: Any) -> CmError:
    return CmError("INVALID_INPUT", message, **kw)


def missing(message: str, **kw: Any) -> CmError:
    return CmError("MISSING_REQUIRED", message, **kw)


def from_exception(exc: BaseException) -> CmError:
    """Map an unexpected exception to a category, as the reference infers from errno and messages."""
    if isinstance(exc, CmError):
        return exc
    if isinstance(exc, FileNotFoundError):
        return CmError("FILE_NOT_FOUND", f"File not found: {exc.filename or exc}")
    if isinstance(exc, PermissionError):
        return CmError("FILE_PERMISSION_DENIED", f"Permission denied: {exc.filename or exc}")
    if isinstance(exc, ConnectionError | TimeoutError):
        return CmError("NETWORK_ERROR", str(exc))
    if isinstance(exc, OSError):
        return CmError("FILE_WRITE_FAILED", f"{exc.strerror or exc}: {exc.filename or ''}".strip())
    return CmError("INTERNAL_ERROR", f"{type(exc).__name__}: {exc}")
