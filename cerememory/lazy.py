"""Package attributes imported on first use (PEP 562), so that importing a package for one light
name (a constant, a settings dataclass) does not load everything the package offers."""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import import_module
from typing import Any


def exports(package: str, names: dict[str, str]) -> Callable[[str], Any]:
    """The package's `__getattr__`: `names` maps an attribute to the submodule (relative, e.g.
    `.engine`) that defines it; the value is cached in the package once imported."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
