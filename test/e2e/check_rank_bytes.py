"""Each rank of a data-parallel job moves its plan's bytes, step by step.

usage: check_rank_bytes.py RANKS STATS.json

STATS.json is the executable's --stats-json of rank 0; rank r > 0 wrote
STATS.json.rank-r. For every rank, every step's bytes per link
(bytes_per_step) must equal the plan's (predicted_bytes_per_iteration), and
every rank's plan must be rank 0's (each holds the whole model). Prints one
line per rank; exits 1 naming the rank, step and link that differ.
"""
import json
import os
import sys

LINKS = ("ssd_read", "ssd_write", "h2d", "d2h")


def main():
    ranks, base = int(sys.argv[1]), sys.argv[2]
    plan0 = None
    for r in range(ranks):
        path = base if r == 0 else f"{base}.rank-{r}"
        if not os.path.exists(path):
            sys.exit(f"rank {r}: no statistics at {path}")
        stats = json.load(open(path))
        plan = stats["predicted_bytes_per_iteration"]
        plan0 = plan0 or plan
        if plan != plan0:
            sys.exit(f"rank {r}: plans {plan}, rank 0 plans {plan0}")
        steps = stats["bytes_per_step"]
        if not steps:
            sys.exit(f"rank {r}: no steps in {path}")
        for s, got in enumerate(steps, 1):
            for link in LINKS:
                if got[link] != plan[link]:
                    sys.exit(f"rank {r} step {s}: {link} moved {got[link]} "
                             f"bytes, the plan {plan[link]}")
        print(f"rank {r}: {len(steps)} steps, every link as planned "
              f"(ssd_read {plan['ssd_read']}, ssd_write {plan['ssd_write']}, "
              f"h2d {plan['h2d']}, d2h {plan['d2h']})")


if __name__ == "__main__":
    main()
