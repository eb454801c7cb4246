"""Security benchmark: what the audit log, the sanitiser and the rate limiter cost.

    /work/venv/bin/python bench/security.py            # 100k audit entries, 500 single stores (~2-3 min)
    /work/venv/bin/python bench/security.py --quick    # 20k entries, 150 single stores

Measured in one run, side by side:
- audit append: µs per entry (AuditLog.append, default fsync interval) and per entry with an
  fsync every entry, on a fresh log of --entries entries;
- audit-verify: seconds for the whole log, reported per 100k entries, at several sizes (plot);
- encode overhead: `encode.store` one record at a time and `encode.batch` of 100, on two data
  dirs opened with the audit log on and off, written in alternating chunks, median records/s and
  the ratio (plus the overhead expected from the parts: append time / store time);
- the secret sanitiser's throughput (MiB/s) on a mixed corpus of prose, code and secrets;
- the rate limiter's check (µs per call).

- encryption at rest: `encode.batch` records/s and `recall.query` latency on an encrypted and a
  plain data dir side by side (same records, interleaved), and the time to open each; the ratio
  encrypted / plain (target ≤ 1.3× slower).

Archive export/import MiB/s are measured by bench/archive.py (bench/results/archive.md).

Writes bench/results/security.md, security.json and security_audit_verify.png.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    RESULTS_DIR,
    LoadMonitor,
    clean_env,
    env_line,
    environment,
    md_table,
    now,
    pyplot,
)

import cerememory  # noqa: E402
from cerememory.security.audit import AUDIT_FILE, AuditLog, verify  # noqa: E402
from cerememory.security.ratelimit import TokenBucketLimiter  # noqa: E402
from cerememory.security.sanitize import sanitize  # noqa: E402


def fill_log(path: Path, n: int, fsync_interval: float = 1.0) -> float:
    """Append n entries shaped like real ones; seconds taken."""
    log = AuditLog(path, fsync_interval=fsync_interval)
    ids = [str(uuid.uuid4()) for _ in range(3)]
    started = now()
    for i in range(n):
        log.append("encode.store", record_ids=ids[: 1 + i % 3], key_id="key-1a2b3c4d",
                   request_id=str(uuid.uuid4()), transport="http",
                   summary={"store": "episodic", "associations_created": 0, "initial_fidelity": 1.0})
    seconds = now() - started
    log.close()
    return seconds


def bench_audit(workdir: Path, entries: int) -> dict:
    sizes = sorted({max(1000, entries // 10), entries // 2, entries})
    verify_rows = []
    for size in sizes:
        path = workdir / f"audit-{size}.jsonl"
        append_s = fill_log(path, size)
        runs = [verify(path) for _ in range(3)]
        assert all(r.ok and r.entries == size for r in runs)
        seconds = statistics.median(r.seconds for r in runs)
        verify_rows.append({"entries": size, "bytes": path.stat().st_size, "append_s": append_s,
                            "verify_s": seconds, "verify_s_per_100k": seconds * 100_000 / size})
    fsync_path = workdir / "audit-fsync.jsonl"
    fsync_n = min(2000, entries)
    fsync_s = fill_log(fsync_path, fsync_n, fsync_interval=0)
    largest = verify_rows[-1]
    return {"verify": verify_rows,
            "append_us": largest["append_s"] / largest["entries"] * 1e6,
            "append_fsync_each_us": fsync_s / fsync_n * 1e6,
            "bytes_per_entry": largest["bytes"] / largest["entries"]}


def _records(n: int, start: int) -> list[dict]:
    return [{"content": {"blocks": [{"text": f"note {start + i}: the build on host {i % 17} took {i % 90} s"}]}}
            for i in range(n)]


def bench_encode(workdir: Path, n: int, rounds: int) -> dict:
    """Both data dirs are written in alternating chunks of 25 calls, so load from other processes
    on a shared machine falls on both sides alike; records/s per side is the median over rounds."""
    mems = {audit: cerememory.open(workdir / f"data-{audit}", semantic="off", audit__enabled=audit)
            for audit in (True, False)}
    rates: dict[str, dict[bool, list[float]]] = {"single": {True: [], False: []}, "batch": {True: [], False: []}}
    try:
        for r in range(rounds):
            for kind, calls, per_call in (("single", n, 1), ("batch", n // 10, 100)):
                spent = {True: 0.0, False: 0.0}
                for chunk in range(0, calls, 25):
                    for audit in ((True, False) if chunk % 50 == 0 else (False, True)):
                        mem = mems[audit]
                        started = now()
                        for i in range(chunk, min(calls, chunk + 25)):
                            if kind == "single":
                                mem.store(f"single {r}-{i}: deploy window moved to {i % 24}:00")
                            else:
                                mem.store_batch(_records(per_call, i * per_call))
                        spent[audit] += now() - started
                for audit in (True, False):
                    rates[kind][audit].append(calls * per_call / spent[audit])
        entries = verify(workdir / "data-True" / AUDIT_FILE)
    finally:
        for mem in mems.values():
            mem.close()
    med = {k: {a: statistics.median(v[a]) for a in v} for k, v in rates.items()}
    return {"n_single": n, "n_batch_records": (n // 10) * 100, "rounds": rounds,
            "records_per_s": {k: {str(a).lower(): v for a, v in d.items()} for k, d in med.items()},
            "ratio_single": med["single"][False] / med["single"][True],
            "ratio_batch": med["batch"][False] / med["batch"][True],
            "audit_entries_written": entries.entries}


CORPUS = "\n".join([
    "The deploy moved to Thursday; the build on ci-7 took 14 minutes and the cache hit rate was 93%.",
    "def connect(user, password):\n    return db.connect(user=user, password=password, timeout=30)\n",
    "export OPENAI_API_KEY=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
    "Authorization: Bearer 7f3a9c2e1b8d4f6a0c5e9b2d7a1f4c8e",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed the flaky recall test",
    "postgres://app:s3cr3t-Passw0rd@db.internal:5432/app",
    "We agreed to keep the retry budget at three attempts and to log every timeout.",
]) + "\n"


def bench_sanitize(mib: float) -> dict:
    text = CORPUS * max(1, int(mib * 2**20 / len(CORPUS)))
    started = now()
    _, count = sanitize(text)
    seconds = now() - started
    return {"mib": len(text) / 2**20, "seconds": seconds, "mib_per_s": len(text) / 2**20 / seconds,
            "redactions": count}


def bench_ratelimit(calls: int) -> dict:
    limiter = TokenBucketLimiter(rate=1e9, burst=10**9)
    clients = [f"key:key-{i:08x}" for i in range(256)]
    started = now()
    for i in range(calls):
        limiter.acquire(clients[i & 255])
    return {"calls": calls, "us_per_call": (now() - started) / calls * 1e6}


WORDS = ("budget roadmap deploy migration incident review hiring invoice contract release backlog sprint "
         "outage dashboard pipeline database cache latency security audit pricing launch design survey "
         "Alice Bob Carol Dave Erin Frank Berlin Lisbon Tokyo Monday Friday").split()


def bench_encryption(workdir: Path, n: int, queries: int = 200) -> dict:
    """The same records into an encrypted and a plain data dir, chunk by chunk in turn; then
    recall on both, reopened so record bodies come from disk (and, encrypted, are opened)."""
    import random

    import numpy as np

    from cerememory.storage.crypto import Vault
    from cerememory.storage.kdf import KdfParams

    rng = random.Random(7)
    texts = [" ".join(rng.choice(WORDS) for _ in range(14)) + f" note {i}" for i in range(n)]
    vectors = np.random.default_rng(7).standard_normal((n, 384)).astype(np.float32)
    dirs = {"plain": workdir / "plain", "encrypted": workdir / "encrypted"}
    Vault.create(dirs["encrypted"], "bench passphrase", KdfParams())
    settings = {"plain": {}, "encrypted": {"encryption__passphrase": "bench passphrase"}}
    seconds = {k: 0.0 for k in dirs}
    mems = {k: cerememory.open(d, semantic="off", **settings[k]) for k, d in dirs.items()}
    try:
        for start in range(0, n, 1000):
            batch = [{"content": {"blocks": [{"text": t, "embedding": vectors[start + j].tolist()}]}}
                     for j, t in enumerate(texts[start:start + 1000])]
            for name in (("plain", "encrypted") if start % 2000 == 0 else ("encrypted", "plain")):
                t0 = now()
                mems[name].store_batch(batch)
                seconds[name] += now() - t0
    finally:
        for mem in mems.values():
            mem.close()
    opened = {}
    for name, d in dirs.items():
        t0 = now()
        mems[name] = cerememory.open(d, semantic="off", **settings[name])
        opened[name] = now() - t0
    latency: dict[str, list[float]] = {k: [] for k in dirs}
    try:
        cues = [" ".join(rng.choice(WORDS) for _ in range(3)) for _ in range(queries)]
        for i, cue in enumerate(cues):
            for name in (("plain", "encrypted") if i % 2 else ("encrypted", "plain")):
                t0 = now()
                mems[name].recall(cue, limit=10, reconsolidate=False)
                latency[name].append(now() - t0)
    finally:
        for mem in mems.values():
            mem.close()
    p50 = {k: statistics.median(v) * 1000 for k, v in latency.items()}
    rate = {k: n / s for k, s in seconds.items()}
    return {"records": n, "queries": queries, "encode_records_per_s": rate, "recall_p50_ms": p50,
            "open_s": opened, "encode_slowdown": rate["plain"] / rate["encrypted"],
            "recall_slowdown": p50["encrypted"] / p50["plain"]}


def plot(audit: dict, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = [r["entries"] for r in audit["verify"]]
    ax.plot(xs, [r["verify_s"] for r in audit["verify"]], "o-", label="audit-verify")
    ax.plot(xs, [r["append_s"] for r in audit["verify"]], "s--", label="appending them")
    ax.set_xlabel("audit entries")
    ax.set_ylabel("seconds")
    ax.set_title("Audit log: verify and append time")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def report(result: dict) -> str:
    audit, enc, san, rl = result["audit"], result["encode"], result["sanitize"], result["ratelimit"]
    crypt = result["encryption"]
    per100k = audit["verify"][-1]["verify_s_per_100k"]
    lines = [
        "# Security benchmark (bench/security.py)",
        "",
        "## Audit log",
        "",
        md_table(["entries", "file MiB", "append s", "verify s", "verify s per 100k"],
                 [[r["entries"], r["bytes"] / 2**20, r["append_s"], r["verify_s"], r["verify_s_per_100k"]]
                  for r in audit["verify"]]),
        "",
        f"- `audit-verify` (and the check at every open): **{per100k:.2f} s per 100k entries** "
        f"({audit['bytes_per_entry']:.0f} bytes per entry; SHA-256 of each line plus one `json.loads`).",
        f"- One append: {audit['append_us']:.1f} µs with the default fsync interval (1 s), "
        f"{audit['append_fsync_each_us']:.0f} µs with `audit.fsync_interval = 0` (fsync every entry).",
        "",
        "## Encode with the audit log on and off",
        "",
        md_table(["operation", "records/s, audit on", "records/s, audit off", "off / on"], [
            ["encode.store, one at a time", enc["records_per_s"]["single"]["true"],
             enc["records_per_s"]["single"]["false"], enc["ratio_single"]],
            ["encode.batch of 100", enc["records_per_s"]["batch"]["true"],
             enc["records_per_s"]["batch"]["false"], enc["ratio_batch"]],
        ]),
        "",
        f"- {enc['n_single']:,} single stores and {enc['n_batch_records']:,} batched records per round, the two "
        f"data dirs written in alternating chunks of 25 calls, median of {enc['rounds']} rounds; "
        f"{enc['audit_entries_written']:,} audit entries written and verified afterwards.",
        f"- Expected cost from the parts: one append ({audit['append_us']:.0f} µs) against one single store "
        f"({1e6 / enc['records_per_s']['single']['false']:,.0f} µs) is "
        f"{audit['append_us'] * enc['records_per_s']['single']['false'] / 1e4:.2f}% — below what this shared "
        "machine can resolve, so ratios within a few percent of 1.00 are noise. One entry per call: batches "
        "amortise it further.",
        "",
        "## Sanitiser and rate limiter",
        "",
        f"- Secret sanitiser: {san['mib_per_s']:.1f} MiB/s over {san['mib']:.1f} MiB of mixed prose, code and "
        f"secrets ({san['redactions']:,} redactions).",
        f"- Rate limiter check: {rl['us_per_call']:.2f} µs per call (256 clients).",
        "",
        "## Encryption at rest",
        "",
        md_table(["measure", "plain", "encrypted", "encrypted vs plain", "target", "result"], [
            ["encode.batch records/s", crypt["encode_records_per_s"]["plain"],
             crypt["encode_records_per_s"]["encrypted"], f"{crypt['encode_slowdown']:.2f}× slower", "≤ 1.3×",
             "PASS" if crypt["encode_slowdown"] <= 1.3 else "MISS"],
            ["recall.query p50 ms (reopened: bodies from disk)", crypt["recall_p50_ms"]["plain"],
             crypt["recall_p50_ms"]["encrypted"], f"{crypt['recall_slowdown']:.2f}× slower", "≤ 1.3×",
             "PASS" if crypt["recall_slowdown"] <= 1.3 else "MISS"],
            ["open s", crypt["open_s"]["plain"], crypt["open_s"]["encrypted"], "", "", ""],
        ]),
        "",
        f"- {crypt['records']:,} records (text and a 384-d caller vector each) stored into both data dirs in "
        f"alternating chunks of 1000, then {crypt['queries']} text queries alternating between them. Opening "
        "the encrypted dir includes one Argon2id derivation (64 MiB, 3 passes) and unwrapping every data key.",
        "- Archive export/import MiB/s: bench/archive.py → bench/results/archive.md.",
        "",
        f"Other processes used {result['load']:.2f} cores on average during the run (a shared machine).",
        "",
        f"Environment: {env_line(result['env'])}",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--encodes", type=int, default=500, help="single stores per side and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--crypt-records", type=int, default=20_000, help="records for the encryption comparison")
    args = parser.parse_args()
    if args.quick:
        args.entries, args.encodes, args.crypt_records = 20_000, 150, 5_000
    clean_env()
    monitor = LoadMonitor()
    monitor.start()
    workdir = Path(tempfile.mkdtemp(prefix="cerememory-bench-security-"))
    try:
        result = {"audit": bench_audit(workdir, args.entries),
                  "encode": bench_encode(workdir, args.encodes, args.rounds),
                  "sanitize": bench_sanitize(4.0), "ratelimit": bench_ratelimit(200_000),
                  "encryption": bench_encryption(workdir, args.crypt_records)}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["load"] = monitor.others_cores()
    result["env"] = environment()
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "security.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result["audit"], RESULTS_DIR / "security_audit_verify.png")
    text = report(result)
    (RESULTS_DIR / "security.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
