"""repair ranks every verdict verify can give (``repair_progress.RANK``): an unranked verdict counts as 0, as bad as a
crash, so a worse trial would count as progress from it (turn 20: non-finite-metric was unranked)."""

from mpfix.verify import repair_progress, verdict


def test_every_verdict_has_a_rank():
    assert set(verdict.EXIT_CODES) <= set(repair_progress.RANK)


def test_a_metric_overflow_ranks_above_a_training_that_stalls_or_diverges():
    rank = repair_progress.RANK
    assert max(rank["stalled"], rank["diverged"], rank["non-finite"]) < rank["non-finite-metric"] < rank["healthy"]
