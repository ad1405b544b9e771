"""What the browser tests share: Debian's Chromium, launched through Playwright for one test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect, sync_playwright

from tests.support.dashboard import CHROMIUM, CHROMIUM_ARGS

# What a page must show, it must show within 15 s, not Playwright's 5: the whole suite runs on two
# shared cores beside Docker and the chaos soak, and a live update that is late there is not a
# missing one. (One that never comes still fails: nothing waits past the 15 s.)
expect.set_options(timeout=15_000)


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
