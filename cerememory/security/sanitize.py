"""The secret sanitiser: credentials in agent logs become `[REDACTED]` before they are stored.

One ordered table of patterns: vendor tokens with a recognisable shape (OpenAI / Anthropic
`sk-`, AWS access key ids, GitHub, GitLab, Slack, Google, Stripe, npm, Hugging Face, SendGrid),
JWTs, PEM private keys, bearer and basic credentials, passwords in URLs, and `password=`-style
assignments; plus configurable extra patterns (`sanitize.extra_patterns`). Where a pattern has a
group named `secret`, only that group is replaced, so the key name stays readable
(`password=[REDACTED]`).

Precision matters as much as recall: a redacted word in ordinary prose or code is lost data. So
there is no bare "any 40-character base64 run" rule (it eats hashes and ids); assignments need
a quoted value or a value that ends like a value (whitespace, `&`, `;`, end of line), values
that are code references (`self.password`, `$DB_PASS`, `os.environ[...]`) are kept, and token
and API-key assignments need a long value with letters and digits.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..cmp.errors import CMPError, ErrorCode

REDACTED = "[REDACTED]"
MAX_PATTERN_CHARS = 256
_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[+*](?:[^()\\]|\\.)*\)\s*[+*{]")

Accept = Callable[[re.Match[str]], bool]


@dataclass(frozen=True)
class Pattern:
    name: str
    regex: re.Pattern[str]
    accept: Accept | None = None  # a second look at a match; False keeps the text


def _p(name: str, pattern: str, flags: int = 0, accept: Accept | None = None) -> Pattern:
    return Pattern(name, re.compile(pattern, flags), accept)


_CODE_REFERENCE = re.compile(
    r"""^(?:[$%{<]|\*+$|x{3,}$|\[REDACTED\]|(?:true|false|null|none|nil|yes|no|undefined|required|optional)$"""
    r"""|(?:self|this|os|process|settings|config|cfg|env|args|request|req|options|params)\b[.\[])"""
    r"""|^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?$""", re.IGNORECASE)
_ARGUMENT = re.compile(r"^[a-z_][a-z_]*$")
_TEMPLATE = ("$", "{", "%(", "<", "***", REDACTED)


def _password_accept(match: re.Match[str]) -> bool:
    """A quoted value is a secret unless it is a template; an unquoted one unless it is a
    variable, a literal like `true`, a placeholder or a template."""
    if match.group("secret") is not None:
        return not match.group("secret").startswith(_TEMPLATE)
    value = match.group("secret2")
    after = match.string[match.end():match.end() + 1]
    if after in (",", ")") and _ARGUMENT.match(value):
        return False  # f(password=password, ...): a variable passed as an argument
    if "=" not in match.group("prefix") and value.isalpha() and value.islower():
        return False  # "the secret: keep it small" is prose; YAML secrets are rarely plain words
    return not _CODE_REFERENCE.search(value)


def _entropic(match: re.Match[str]) -> bool:
    value = match.group("secret")
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


_VALUE_END = r"(?=[\s&;,)\]}]|$)"
_PASSWORD_KEYS = (r"(?:password|passwd|passphrase|secret|client[_-]?secret|secret[_-]?key|"
                  r"aws[_-]?secret[_-]?access[_-]?key)")
_TOKEN_KEYS = (r"(?:api[_-]?key|apikey|access[_-]?key(?:[_-]?id)?|access[_-]?token|auth[_-]?token|refresh[_-]?token|"
               r"session[_-]?token|bearer[_-]?token|id[_-]?token|token|private[_-]?key|x-api-key)")
_KEY_PREFIX = r"(?<![A-Za-z0-9])(?:[A-Za-z0-9]+[_-])*"  # DB_PASSWORD, openai_api_key, x-api-key

BUILTIN: tuple[Pattern, ...] = (
    _p("private_key",
       r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
       r"(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|(?:(?:\\n|\s)+[A-Za-z0-9+/=:,\-]+)*)"),
    _p("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
    _p("anthropic_openai_key", r"(?<![A-Za-z0-9])sk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    _p("stripe_key", r"(?<![A-Za-z0-9])(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    _p("aws_access_key_id",
       r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[0-9A-Z]{16}(?![A-Z0-9])"),
    _p("github_token", r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})"),
    _p("gitlab_token", r"(?<![A-Za-z0-9])glpat-[A-Za-z0-9_-]{20,}"),
    _p("slack_token", r"(?<![A-Za-z0-9])xox[abposre]-[A-Za-z0-9-]{10,}"),
    _p("slack_webhook", r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9_/-]{20,}"),
    _p("google_api_key", r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}"),
    _p("google_oauth_token", r"(?<![A-Za-z0-9])ya29\.[0-9A-Za-z_-]{20,}"),
    _p("npm_token", r"(?<![A-Za-z0-9])npm_[A-Za-z0-9]{36}"),
    _p("huggingface_token", r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}"),
    _p("sendgrid_key", r"(?<![A-Za-z0-9])SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),
    _p("bearer", r"(?<![A-Za-z0-9])(?P<prefix>Bearer\s+)(?P<secret>[A-Za-z0-9\-._~+/]{16,}=*)", re.IGNORECASE),
    _p("basic_auth", r"(?P<prefix>authorization\s*[:=]\s*[\"']?basic\s+)(?P<secret>[A-Za-z0-9+/]{8,}={0,2})",
       re.IGNORECASE),
    _p("url_password", r"(?P<prefix>\b[a-z][a-z0-9+.-]*://[^:@/\s\"']+:)(?P<secret>[^@/\s\"']+)(?=@)",
       re.IGNORECASE),
    _p("password_assignment",
       _KEY_PREFIX + _PASSWORD_KEYS + r"[\"']?(?P<prefix>\s*(?::=|=>|[:=])\s*)"
       r"(?:(?P<quote>[\"'`])(?P<secret>[^\"'`\n]{3,})(?P=quote)|(?P<secret2>[^\s\"'`&;,)\]}]{3,})"
       + _VALUE_END + ")",
       re.IGNORECASE, _password_accept),
    _p("token_assignment",
       _KEY_PREFIX + _TOKEN_KEYS + r"[\"']?(?P<prefix>\s*(?::=|=>|[:=])\s*[\"'`]?)(?P<secret>[A-Za-z0-9\-_.~+/=]{16,})",
       re.IGNORECASE, _entropic),
)


def parse_patterns(value: Any) -> tuple[str, ...]:
    """Extra patterns from a setting: a TOML array, a JSON array string, or one per line. Each
    must compile, stay under 256 characters and avoid nested quantifiers like `(a+)+`
    (catastrophic backtracking on long logs)."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError as exc:
                raise ValueError(f"not a JSON array of patterns: {exc}") from None
        else:
            value = [line for line in text.splitlines() if line.strip()]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a list of regular expressions")
    for pattern in value:
        if len(pattern) > MAX_PATTERN_CHARS:
            raise ValueError(f"pattern longer than {MAX_PATTERN_CHARS} characters: {pattern[:40]!r}...")
        if _NESTED_QUANTIFIER.search(pattern):
            raise ValueError(f"pattern {pattern!r} nests quantifiers (catastrophic backtracking)")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"pattern {pattern!r} does not compile: {exc}") from None
    return tuple(dict.fromkeys(value))


class Sanitizer:
    """Redacts the built-in patterns and `extra` (case-insensitive regexes, whole match)."""

    def __init__(self, extra: Iterable[str] = ()) -> None:
        try:
            extra = parse_patterns(list(extra))
        except ValueError as exc:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"sanitize.extra_patterns: {exc}",
                           hint="fix or remove the pattern") from None
        self.patterns = BUILTIN + tuple(_p(f"extra:{p}", p, re.IGNORECASE) for p in extra)

    def sanitize(self, text: str) -> tuple[str, int]:
        """The text with every secret replaced, and how many were replaced."""
        count = 0
        for pattern in self.patterns:
            def replace(match: re.Match[str], pattern: Pattern = pattern) -> str:
                nonlocal count
                if pattern.accept is not None and not pattern.accept(match):
                    return match.group(0)
                count += 1
                groups = match.re.groupindex
                if "secret" not in groups:
                    return REDACTED
                name = "secret" if match.group("secret") is not None else "secret2"
                start, end = match.span(name)
                whole = match.start()
                text_ = match.group(0)
                return text_[:start - whole] + REDACTED + text_[end - whole:]

            text = pattern.regex.sub(replace, text)
        return text, count


_DEFAULT = Sanitizer()


def sanitize(text: str, extra: Iterable[str] = ()) -> tuple[str, int]:
    """Module-level shortcut: the built-in patterns (plus `extra`)."""
    sanitizer = Sanitizer(extra) if extra else _DEFAULT
    return sanitizer.sanitize(text)
