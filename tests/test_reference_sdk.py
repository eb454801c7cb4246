"""The reference implementation's own Python SDK (PyPI `cerememory` 0.2.2) against this server, and
this package's `Client` as a drop-in for it.

One driver script (refsdk_driver.py) calls every method of the SDK's `Client`: once with the SDK
importable — installed in a directory of its own, since its import name is this package's too,
and run in a subprocess that sees only that directory and the standard library — and once with
this package in its place.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import cerememory
from cerememory import errors, types

from .conftest import ServerThread

SDK = "cerememory==0.2.2"
DRIVER = Path(__file__).with_name("refsdk_driver.py")
ROOT = Path(__file__).resolve().parents[1]
# what pip says when PyPI cannot be reached (then the test is skipped, not failed)
OFFLINE = ("NewConnectionError", "Failed to establish a new connection", "Temporary failure in name resolution",
           "Network is unreachable", "No matching distribution found", "ConnectTimeout", "ProxyError")
# run the driver with the SDK's directory first on sys.path: -I -S keep out the environment,
# the user site and site-packages (this package and its dependencies)
BOOT = ("import runpy, sys; sys.path.insert(0, sys.argv[1]); sys.argv = sys.argv[2:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')")


@pytest.fixture(scope="session")
def reference_sdk(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SDK installed once (kept in the pytest cache across runs) with `pip install --target`."""
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    root = Path(cache.mkdir("reference-sdk")) if cache is not None else tmp_path_factory.mktemp("reference-sdk")
    target = root / SDK.replace("==", "-")
    if (target / "cerememory" / "client.py").is_file():
        return target
    staging = root / f"installing-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "--no-input", "--target", str(staging), SDK], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        if any(marker in done.stderr for marker in OFFLINE):
            pytest.skip(f"cannot install {SDK} from PyPI (no network): {done.stderr.strip().splitlines()[-1]}")
        pytest.fail(f"pip install {SDK} failed:\n{done.stderr}")
    try:
        staging.rename(target)
    except OSError:  # another worker installed it first
        shutil.rmtree(staging, ignore_errors=True)
    return target


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    with cerememory.open(tmp_path_factory.mktemp("refsdk-data"), semantic="off") as mem:
        thread = ServerThread(mem.engine)
        yield thread
        thread.stop()


def drive(command: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=DRIVER.parent)
    assert done.returncode == 0 and done.stdout.rstrip().endswith("all methods ok"), done.stdout + done.stderr
    return done.stdout


def test_reference_sdk_drives_every_method(reference_sdk: Path, server: ServerThread) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = drive([sys.executable, "-I", "-S", "-c", BOOT, str(reference_sdk), str(DRIVER), server.url], env)
    assert f"cerememory from {reference_sdk}" in out  # theirs, not ours


def test_our_client_is_a_drop_in_for_it(server: ServerThread) -> None:
    out = drive([sys.executable, str(DRIVER), server.url], {**os.environ, "PYTHONPATH": str(ROOT)})
    assert f"cerememory from {ROOT / 'cerememory'}" in out


def test_every_sdk_name_is_exported() -> None:
    assert set(cerememory.SDK_TYPES) == set(types.__all__)
    assert set(cerememory.SDK_ERRORS) == set(errors.__all__) - {"ConnectionError", "TimeoutError"}
    for name in (*cerememory.SDK_TYPES, *cerememory.SDK_ERRORS):
        assert getattr(cerememory, name) is getattr(types if name in types.__all__ else errors, name)
    assert errors.CerememoryError is cerememory.CMPError
    assert isinstance(cerememory.CMPError("RECORD_NOT_FOUND", "gone"), errors.RecordNotFoundError)
    raised = errors.RecordNotFoundError("gone")  # the SDK's form: the class names the code
    assert raised.code == "RECORD_NOT_FOUND" and raised.message == "gone" and raised.status_code == 404


def test_return_values_read_both_ways(mem: cerememory.Memory) -> None:
    """The SDK's values (id, list, count) still answer the CMP response's attributes, embedded too."""
    rid = mem.store("the deploy key rotates on Mondays", store="semantic")
    assert isinstance(rid, uuid.UUID) and rid.record_id == rid and rid.store == "semantic"
    assert rid.model_dump(mode="json")["record_id"] == str(rid)
    hits = mem.recall("deploy key")
    assert isinstance(hits, list) and hits[0].record.id == rid and hits.memories == list(hits)
    assert hits.total_candidates >= 1
    raw = mem.store_raw("user: rotate it", session_id="s1")
    assert mem.recall_raw(session_id="s1")[0].id == raw == raw.record_id
    with pytest.raises(errors.ForgetUnconfirmedError):
        mem.forget([rid])  # a list of ids still asks for confirm=True
    with pytest.raises(errors.ForgetUnconfirmedError):
        mem.forget(store="semantic")  # and so does a whole store
    assert mem.get_record(rid).id == rid
    deleted = mem.forget(rid)  # ids named one by one, as the SDK does, confirm themselves
    assert deleted == 1 and deleted.records_deleted == 1


def test_async_client_has_the_sdk_methods(server: ServerThread) -> None:
    async def scenario() -> None:
        async with cerememory.AsyncClient(server.url) as client:
            assert (await client.health()).status == "ok"
            rid = await client.store("async coffee with Alice")
            assert isinstance(rid, uuid.UUID)
            assert [h.record.id for h in await client.recall("async coffee")][:1] == [rid]
            assert (await client.introspect_record(rid)).id == rid
            assert await client.forget(rid) == 1
            with pytest.raises(errors.RecordNotFoundError):
                await client.get_record(rid)

    asyncio.run(scenario())
