"""Where urgent requests are lost under three settings of the gateway's waits (a diagnostic, not a scored bench).

    .venv/bin/python bench/gateway_waits.py                          # Azure code surge, held-apart seed 700, from 375 s
    .venv/bin/python bench/gateway_waits.py --scenario mooncake-surge --seed 701 --at 495

Replays one `bench/control.py` scenario three times with the waits of normal and low work at the gateway fixed
from `--at` on (a `hindsight` plan with no floors): as the fleet file sets them, shortened as the policy's first
tightening step shortens them, and lengthened to twice the fleet file's.  For each it prints urgent goodput and
every failed attempt (retried or final) by tier and by where it failed: the gateway's bucket (`_through_lane`),
its flow control with the nodes' queues full (`_drain_flow`), the pool refusing at once because its breaker is
open or no node is in rotation (`_send_to_pool`, "shed").  docs/control.md reads seed 700's figures: held-apart,
never scored.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import control as cb  # noqa: E402

import infercast.simulator.twin.router as rt  # noqa: E402
from infercast.simulator.control.driver import run_arm  # noqa: E402
from infercast.simulator.control.plans import Plan  # noqa: E402

TIERS = ("urgent", "normal", "low")


def tallied_failures() -> collections.Counter:
    """Wrap the twin router's one place a failed attempt goes through, counting (tier, where, outcome)."""
    counts: collections.Counter = collections.Counter()
    fail = rt.Router._fail

    def counted(self, reqs, pool_idx, outcome, t):
        where = sys._getframe(1).f_code.co_name  # the router method that failed it
        for prio, n in collections.Counter(reqs.prio.tolist()).items():
            counts[(TIERS[prio], where, outcome)] += n
        return fail(self, reqs, pool_idx, outcome, t)

    rt.Router._fail = counted
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="azure-code-surge", choices=[s.name for s in cb.SCENARIOS])
    ap.add_argument("--seed", type=int, default=700, help="a held-apart seed (700-703): the scored ones are 0-2")
    ap.add_argument("--at", type=float, default=375.0, help="seconds: the waits are fixed from here on")
    args = ap.parse_args()
    sc = next(s for s in cb.SCENARIOS if s.name == args.scenario)
    cfg, trace = cb.load(sc, ROOT / "tests" / "data" / "traces", args.seed)
    tiers, policy = cfg.protections.tiers, cfg.policy
    settings = {
        "as the fleet file": None,
        "shortened (the first step)": (policy.tightened_normal_queue_seconds, policy.tightened_low_queue_seconds),
        "lengthened (x2)": (2 * tiers.normal_queue_seconds, 2 * tiers.low_queue_seconds),
    }
    counts = tallied_failures()
    for label, waits in settings.items():
        counts.clear()
        plan = Plan()
        if waits is not None:
            admission = (("normal_queue_seconds", waits[0]), ("low_queue_seconds", waits[1]))
            plan = Plan(steps=((args.at, ()),), admission=admission)
        s = run_arm(cfg, "hindsight", args.seed, trace, plans=[plan]).summary
        print(f"{args.scenario} seed {args.seed}, waits {label} {waits or ''}: urgent goodput "
              f"{s['urgent_goodput_rps']} req/s, goodput {s['goodput_rps']} req/s")  # fmt: skip
        for (tier, where, outcome), n in sorted(counts.items()):
            print(f"    {tier:6s} {outcome:8s} at {where:14s} {n:8,d}")


if __name__ == "__main__":
    main()
