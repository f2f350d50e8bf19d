"""The attention probe's headline: "layer 1" is the second block."""

from __future__ import annotations

from vitladder.analysis.probes.attention import headline_layer


def test_layer_one_is_the_second_block_or_a_one_layer_models_only_one() -> None:
    assert [headline_layer(n) for n in (1, 2, 7)] == [0, 1, 1]
