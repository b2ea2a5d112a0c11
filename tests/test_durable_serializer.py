"""`JsonSerializer`, DBOS's serializer for durable runs: what a step stores comes back as it was."""

from __future__ import annotations

import datetime

import pytest

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


@pytest.mark.parametrize(
    ("stored", "refusal"),
    [
        # Importing a `__main__` module would run the command line; a function is not a type to rebuild.
        ('{"$type":"code_puppy.__main__:x","value":1}', "refusing to rebuild a code_puppy.__main__:x"),
        ('{"$type":"code_puppy.errors:one_line","value":1}', "refusing to rebuild a code_puppy.errors:one_line"),
        ('{"$type":"os:system","value":"true"}', "refusing to rebuild a os:system"),
        ('{"foo":1}', "a value of the durable runs database that this serializer did not write"),
    ],
)
def test_what_the_database_names_is_rebuilt_only_as_a_trusted_type(stored: str, refusal: str) -> None:
    with pytest.raises(TypeError) as refused:
        JsonSerializer().deserialize(stored)
    assert str(refused.value).startswith(refusal)
