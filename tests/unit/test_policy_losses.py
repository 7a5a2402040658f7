"""The loss window every policy reads, built by one function for the controller (steps, one loss per rank) and
the simulator (epochs, a validation metric)."""

from __future__ import annotations

from submarine_elastic.policy import LOSS_WINDOW, loss_window


def test_one_entry_per_step_the_mean_of_its_ranks_oldest_first():
    # Two ranks report each step, in any order; rank 1's loss is rank 0's plus 1.
    samples = [(step, float(step) + rank) for step in (3, 1, 2) for rank in (1, 0)]
    assert loss_window(samples) == (1.5, 2.5, 3.5)


def test_only_the_newest_steps_are_kept():
    assert LOSS_WINDOW == 32
    window = loss_window((step, float(step)) for step in range(100))
    assert window == tuple(float(step) for step in range(100 - LOSS_WINDOW, 100))


def test_a_metric_where_higher_is_better_is_negated():
    assert loss_window(enumerate((0.4, 0.5, 0.6)), higher_is_better=True) == (-0.4, -0.5, -0.6)
    assert loss_window(enumerate((0.4, 0.5, 0.6))) == (0.4, 0.5, 0.6)


def test_nothing_reported_is_an_empty_window():
    assert loss_window([]) == ()
