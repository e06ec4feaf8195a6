"""The process's cache of lookup clients (real clients that never connect: nothing here needs a broker)."""

from __future__ import annotations

import pytest

from acker.kafka import lookups


def test_closing_all_lookups_closes_the_cached_clients_and_the_next_call_makes_new_ones() -> None:
    client = {"bootstrap.servers": "127.0.0.1:1", "log_level": 0}
    first = lookups.lookups(client)
    assert lookups.lookups(dict(client)) is first  # one per configuration
    lookups.close_all()
    again = lookups.lookups(client)
    assert again is not first
    lookups.close_all()
    with pytest.raises(RuntimeError, match="closed"):  # a closed client refuses every call
        first._consumer.assignment()
