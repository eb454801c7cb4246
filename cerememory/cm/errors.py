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

_INTERNAL = ["Re-run with '--verbose' to capture diagnostics.",
             "If this persists, file a bug report with the command and the verbose output."]
_INPUT = ["Run 'cm <command> --help' to see expected arguments and flags.", "Fix the input and re-run the command."]
DEFAULT_RECOVERY = {  # the reference's where they hold here; Cerememory's own for storage and the server
    "INVALID_INPUT": _INPUT, "MISSING_REQUIRED": _INPUT, "ALREADY_EXISTS": _INPUT, "VALIDATION_FAILED": _INPUT,
    "BULLET_NOT_FOUND": ["Run 'cm playbook list' to see available rule IDs.",
                         "Use 'cm similar \"<query>\"' to search for related rules.",
                         "Double-check the bullet id you provided (example: b-abc123)."],
    "TRAUMA_NOT_FOUND": _INTERNAL,
    "SESSION_NOT_FOUND": ["Verify the session path exists on disk.",
                          "Check the session id with: cm history \"<query>\""],
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
    "INTERNAL_ERROR": _INTERNAL,
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

    def human(self) -> str:
        """The error as the reference prints it without --json (to stderr)."""
        lines = [f"cm: error: {self.message}"]
        if self.cause:
            lines.append(f"Cause: {self.cause}")
        if self.recovery:
            lines += ["Recovery:", *(f"  - {step}" for step in self.recovery)]
        if self.hint:
            lines.append(f"Hint: {self.hint}")
        return "\n".join(lines)


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
