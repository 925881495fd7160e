"""Check that an engine change decides nothing differently: dump the plans of several bench worlds, then
compare them with another checkout's.

    .venv/bin/python bench/plan_check.py dump /tmp/before.pickle     # in the old checkout
    .venv/bin/python bench/plan_check.py compare /tmp/before.pickle  # in the new one

The worlds are ``bench_cycle``'s, smaller than its default (1,000 nodes, 2,000 pending jobs) so a check
takes seconds, for seeds 1-3, with and without placement rules, under the ``portal`` and ``binpack``
policies. A plan is compared whole (admissions with nodes and devices, preemptions, pending reasons and
estimated starts) except its ``stats`` (cache-hit counters and the like may change with the code).
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_cycle import build
from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Plan, Policy

WORLDS = [(seed, rules) for seed in (1, 2, 3) for rules in (0.0, 0.2)]
POLICIES = ("portal", "binpack")


def plans() -> dict[str, Plan]:
    out = {}
    for seed, rules in WORLDS:
        snapshot = build(1000, 2000, 20, 0.5, seed, rules)
        for name in POLICIES:
            plan = run_cycle(snapshot, Policy(placement=name, seed=seed), 5000.0)
            out[f"seed={seed} rules={rules} {name}"] = Plan(plan.admissions, plan.preemptions, plan.pending)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("dump", "compare"), help="dump this checkout's plans, or compare with a dump")
    parser.add_argument("path", type=Path, help="the pickle file to write (dump) or read (compare)")
    args = parser.parse_args()
    mode, path = args.mode, args.path
    if mode == "compare" and not path.is_file():
        parser.error(f"{path}: no such file (write it with 'dump' in the other checkout first)")
    current = plans()
    if mode == "dump":
        path.write_bytes(pickle.dumps(current))
        print(f"{len(current)} plans written to {path}")
        return
    before = pickle.loads(path.read_bytes())  # our own file
    differ = [key for key in before if before[key] != current.get(key)]
    for key in current:
        plan = current[key]
        print(
            f"{key}: {len(plan.admissions)} admitted, {len(plan.preemptions)} preempted, {len(plan.pending)} pending"
            + ("  DIFFERS" if key in differ else "")
        )
    print("identical" if not differ else f"{len(differ)} of {len(before)} plans differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
