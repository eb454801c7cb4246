"""Regenerate the reference sections of docs/ from the code (operations, errors, settings, CLI).

Run `python scripts/gen_docs.py` after changing them; tests/test_docs.py fails while the
docs are out of date.
"""

from __future__ import annotations

import json
import os
import re
import sys
import typing
from enum import Enum
from pathlib import Path

from pydantic import BaseModel

from cerememory.cli import build_parser
from cerememory.cmp.dispatch import OPERATIONS
from cerememory.cmp.errors import GRPC_STATUS, HTTP_STATUS, WHEN, ErrorCode
from cerememory.config import SETTINGS

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _fields(model: type[BaseModel]) -> str:
    parts = []
    for name, field in model.model_fields.items():
        if name == "header":
            continue
        if field.is_required():
            parts.append(f"`{name}` (required)")
        elif field.default is None or field.default_factory is not None:
            parts.append(f"`{name}`")
        else:
            value = field.default.value if isinstance(field.default, Enum) else field.default
            parts.append(f"`{name}` = `{json.dumps(value)}`")
    return ", ".join(parts) or "—"


def operations() -> str:
    lines = ["| operation | what it does | request fields | response |", "|---|---|---|---|"]
    for op in OPERATIONS.values():
        response = "none (HTTP 204)" if op.response.__name__ == "Empty" else f"`{op.response.__name__}`"
        lines.append(f"| `{op.name}` | {op.summary} | {_fields(op.request)} | {response} |")
    return "\n".join(lines)


def errors() -> str:
    lines = ["| code | HTTP | gRPC | raised when |", "|---|---|---|---|"]
    for code in ErrorCode:
        lines.append(f"| `{code.value}` | {HTTP_STATUS[code]} | `{GRPC_STATUS[code]}` | {WHEN[code]} |")
    return "\n".join(lines)


def settings() -> str:
    lines = ["| setting | environment variable | default | meaning |", "|---|---|---|---|"]
    for s in SETTINGS:
        default = "~/.cerememory/data" if s.name == "data_dir" else s.default
        lines.append(f"| `{s.name}` | `{s.env}` | `{default}` | {s.help} |")
    return "\n".join(lines)


def cli() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps help to the terminal width
    parser = build_parser()
    out = []
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, command in sub.choices.items():
        out.append(f"### `cerememory {name}`\n\n```\n{command.format_help().strip()}\n```\n")
    return "\n".join(out)


def routes() -> str:
    lines = ["| method | path | operation | success |", "|---|---|---|---|"]
    for op in OPERATIONS.values():
        lines.append(f"| `{op.http.method}` | `{op.http.path}` | `{op.name}` | {'204' if op.no_content else '200'} |")
    return "\n".join(lines)


def decay_table() -> str:
    from cerememory.dynamics import decay

    points = [("1 h", decay.HOUR), ("1 d", decay.DAY), ("7 d", 7 * decay.DAY), ("30 d", 30 * decay.DAY),
              ("365 d", 365 * decay.DAY)]
    lines = ["| store | d | S | prune | b | λ | emotion | " + " | ".join(p for p, _ in points)
             + " | forgotten after |", "|---" * (8 + len(points)) + "|"]
    for store, p in decay.DEFAULT_PARAMS.items():
        for label, intensity in (("neutral", 0.0), ("intense", 1.0)):
            values = [f"{float(decay.fidelity(1.0, t, p.stability, p.exponent, intensity)):.2f}" for _, t in points]
            life = float(decay.seconds_until(p.prune, 1.0, p.stability, p.exponent, intensity))
            lifetime = (f"{life / decay.DAY:,.0f} days" if life >= decay.DAY else f"{life / decay.HOUR:.1f} hours")
            scale = f"{p.stability / decay.HOUR:g} h" if p.stability >= decay.HOUR else f"{p.stability / 60:g} min"
            lines.append(f"| {store.value} | {p.exponent} | {scale} | {p.prune} | {p.boost} "
                         f"| {p.interference} | {label} | " + " | ".join(values) + f" | {lifetime} |")
    return "\n".join(lines)


SECTIONS = {"cmp.md": {"operations": operations, "errors": errors},
            "decay.md": {"decay": decay_table},
            "http.md": {"routes": routes},
            "configuration.md": {"settings": settings},
            "cli.md": {"commands": cli}}


def render(text: str, generators: dict[str, typing.Callable[[], str]]) -> str:
    for name, generate in generators.items():
        pattern = re.compile(rf"(<!-- generated:{name} -->\n).*?(<!-- /generated:{name} -->)", re.S)
        text = pattern.sub(lambda m, g=generate: m.group(1) + g() + "\n" + m.group(2), text)
    return text


def stale() -> list[str]:
    return [f for f, g in SECTIONS.items() if render((DOCS / f).read_text(), g) != (DOCS / f).read_text()]


def main() -> int:
    for name, generators in SECTIONS.items():
        path = DOCS / name
        path.write_text(render(path.read_text(), generators))
    return 0


if __name__ == "__main__":
    sys.exit(main())
