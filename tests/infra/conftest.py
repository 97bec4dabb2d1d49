"""The infra tests' event loop.

Pulumi's runtime (mocks included) waits on the main thread's current event loop. Async tests
elsewhere in the suite (pytest-asyncio, kmock) leave the main thread with none, so each infra
test gets a fresh one of its own, closed after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def event_loop_for_pulumi() -> Iterator[None]:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield
    finally:
        asyncio.set_event_loop(None)
        loop.close()
