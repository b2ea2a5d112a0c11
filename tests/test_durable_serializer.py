"""`JsonSerializer`, DBOS's serializer for durable runs: what a step stores comes back as it was."""

from __future__ import annotations

import datetime

from code_puppy.durable.serializer import JsonSerializer


def test_a_deadline_round_trips_with_its_time_zone() -> None:
    # A run with --timeout gives its model requests a deadline (a datetime), which a step stores.
    deadline = datetime.datetime(2026, 12, 3, 0, 1, 2, 345678, tzinfo=datetime.UTC)
    serializer = JsonSerializer()
    stored = serializer.serialize({"deadline": deadline, "naive": deadline.replace(tzinfo=None)})
    assert stored == (
        '{"$dict":{"deadline":{"$datetime":"2026-12-03T00:01:02.345678+00:00"},'
        '"naive":{"$datetime":"2026-12-03T00:01:02.345678"}}}'
    )
    assert serializer.deserialize(stored) == {"deadline": deadline, "naive": deadline.replace(tzinfo=None)}
