"""gRPC conversion of a recall, two source trees side by side.

    python bench/grpc_convert.py --before /tmp/base --rounds 3

One recall.query response (10 memories out of 1,000 records, text cue, semantic off) is turned
from the model the dispatcher returns into its proto message (what the server does before it
answers), back into CMP JSON (what `GrpcClient.dispatch` does with the answer) and back into
the response model (what its typed methods, `recall` and the rest, do), and a request is turned
into its proto message, each many times in a fresh process per tree and round, the trees
alternating. Figures are CPU
milliseconds per conversion in that process (the quickest of five blocks of calls, as other
work on a shared machine only ever adds to a block); each round also checks that the JSON which comes
back is exactly what `dispatch` returned.
Writes bench/results/grpc_convert.md and grpc_convert.json.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO_DIR, RESULTS_DIR, ab_parser, git_rev, median_ratio, pick, run_tree  # noqa: E402

CHILD = r"""
import json, sys, tempfile, time
import cerememory
from cerememory.transport import grpc_convert as convert
with cerememory.open(tempfile.mkdtemp(), semantic="off") as mem:
    mem.store_batch([{"content": {"blocks": [{"text": f"note {i} about rotating the deploy key, step {i % 13}"}]}}
                     for i in range(1000)])
    request = {"cue": {"text": "rotating deploy key"}, "limit": 10, "reconsolidate": False}
    model = mem.dispatcher.call("recall.query", request)
    response = model.model_dump(mode="json")
def cpu_ms(work, n, blocks=5):  # the quickest of a few blocks: other work on the cores only adds
    best = float("inf")
    for _ in range(blocks):
        start = time.process_time()
        for _ in range(n):
            work()
        best = min(best, (time.process_time() - start) / n * 1000)
    return best
message = convert.to_proto_response("recall.query", response)
if hasattr(convert, "model_to_message"):  # the server writes the model into the message directly
    to_proto = lambda: convert.to_proto_response("recall.query", model)
    assert to_proto() == message
else:  # the server went through the JSON
    to_proto = lambda: convert.to_proto_response("recall.query", model.model_dump(mode="json"))
print(json.dumps({
    "response_to_proto_ms": cpu_ms(to_proto, 300),
    "proto_to_response_ms": cpu_ms(lambda: convert.from_proto_response("recall.query", message), 300),
    "proto_to_model_ms": cpu_ms(lambda: convert.response_model("recall.query", message, type(model)), 300),
    "request_to_proto_ms": cpu_ms(lambda: convert.to_proto("recall.query", request), 3000),
    "identical": convert.from_proto_response("recall.query", message) == json.loads(json.dumps(response, default=str)),
}))
"""

MEASURES = {"response_to_proto_ms": "response → proto (server)", "proto_to_response_ms": "proto → JSON (client)",
            "proto_to_model_ms": "proto → model (client's typed methods)",
            "request_to_proto_ms": "request → proto (client)"}


def main() -> None:
    args = ab_parser(__doc__, rounds=3).parse_args()
    trees = {"before": args.before.resolve(), "after": REPO_DIR}
    rows: list[dict] = []
    for r in range(args.rounds):
        for label, tree in trees.items():
            rows.append({"round": r, "tree": label, "load1": os.getloadavg()[0], **run_tree(tree, CHILD)})
            print(json.dumps(rows[-1]), flush=True)
    lines = ["# gRPC conversion of a recall, before and after", "",
             f"`bench/grpc_convert.py --before <tree> --rounds {args.rounds}` — before {git_rev(args.before)}, "
             f"after {git_rev()}: one recall.query response (10 of 1,000 "
             "records) converted many times in a fresh process per tree and round, the trees alternating; CPU ms "
             "per conversion, the quickest of five blocks of calls. 1-minute load average of the "
             f"{os.cpu_count()}-core machine at the start of each run in the last column.", "",
             "| round | tree | " + " | ".join(MEASURES.values()) + " | JSON identical | load |",
             "|---|---|" + "---|" * len(MEASURES) + "---|---|"]
    for r in range(args.rounds):
        for label in trees:
            x = pick(rows, round=r, tree=label)
            lines.append(f"| {r + 1} | {label} | " + " | ".join(f"{x[k]:.3f}" for k in MEASURES)
                         + f" | {'yes' if x['identical'] else 'NO'} | {x['load1']:.1f} |")
    ratios = [median_ratio(rows, k, {"tree": "after"}, {"tree": "before"}) for k in MEASURES]
    lines.append("| median after / before | | " + " | ".join(f"{v:.2f}×" for v in ratios) + " | | |")
    RESULTS_DIR.joinpath("grpc_convert.md").write_text("\n".join(lines) + "\n")
    RESULTS_DIR.joinpath("grpc_convert.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
