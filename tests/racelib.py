"""Helpers of the race's tests: what a seeded run of the race returns, without training."""
from __future__ import annotations


def seeded_results(workload, methods, seeds, targets, *, edge="", extra_point=None):
    """The results :func:`scalable_softmax.repro.race.run.run_seeds` would return when
    every seed of every method reaches every level at ``0.1 (seed + 1)`` seconds, its
    one checkpoint at the tightest target (``extra_point``: more numbers of that
    checkpoint), the test log-loss 2.5 at every arrival."""
    point = {"seconds": None, "epoch": 0.5, "val_log_loss": min(targets.values()),
             **(extra_point or {})}
    return [{"workload": workload, "job": {"method": m, "seed": s, "lr": 0.1, "threads": 1},
             "status": "target", "info": {"threads_used": 1},
             "points": [{**point, "seconds": 0.1 * (s + 1)}],
             "arrivals": {str(lv): 0.1 * (s + 1) for lv in targets},
             "test_at_target": {str(lv): 2.5 for lv in targets},
             "chosen": {"config": "", "at_grid_edge": edge, "candidates": 2}}
            for m in methods for s in seeds]
