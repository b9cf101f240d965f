"""The sync client is generated from the async one (``tools/gen_sync.py``):
the committed ``client.py`` must be exactly the generator's output, so an
edit to one copy only fails here. (``test_async.py`` checks that the two
expose the same methods with the same parameters.)"""

from __future__ import annotations

import re

import gen_sync  # tools/ is on pytest's pythonpath (pyproject.toml)
import pytest

FIX = "edit src/delayd/aio.py, then run `python tools/gen_sync.py` in clients/python"


def test_the_committed_sync_client_is_the_generated_one() -> None:
    committed = gen_sync.SYNC_TARGET.read_text(encoding="utf-8")
    assert committed == gen_sync.generate(), f"src/delayd/client.py is not the generator's output: {FIX}"


def test_the_sync_client_has_nothing_async_left() -> None:
    """A new async name or call in aio.py that no rule rewrites shows up here
    (as well as in the failing imports or signatures it would cause)."""
    generated = gen_sync.generate()
    assert re.findall(r"(?i)\basync\w*|\bawait\b|\basyncio\b|\baio_\w+", generated) == []


def test_an_edit_to_the_async_copy_changes_the_sync_one() -> None:
    source = gen_sync.ASYNC_SOURCE.read_text(encoding="utf-8")
    edited = source.replace('"""Every queue, by name."""', '"""Every queue."""')
    assert edited != source
    assert gen_sync.unasync(edited) != gen_sync.unasync(source)
    assert '"""Every queue."""' in gen_sync.unasync(edited)


def test_a_rule_that_no_longer_applies_stops_the_generator() -> None:
    source = gen_sync.ASYNC_SOURCE.read_text(encoding="utf-8").replace("asyncio.sleep(", "anyio.sleep(")
    with pytest.raises(gen_sync.RuleMismatch, match="asyncio.sleep"):
        gen_sync.unasync(source)
