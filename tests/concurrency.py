"""A scripted backend that answers out of order: each call sleeps a random few milliseconds
before delegating, and the wrapper records how many calls were in flight at once. Used to show
that a generator's records do not depend on how many calls run concurrently."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any


class Jittered:
    def __init__(self, script: Callable[[list[dict[str, str]], int], Any], most: float = 0.02):
        self.script, self.most = script, most
        self._lock = threading.Lock()
        self._rng = random.Random()  # unseeded on purpose: timing must not matter
        self.in_flight = 0
        self.max_in_flight = 0

    def __call__(self, messages: list[dict[str, str]], seed: int) -> Any:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            pause = self._rng.uniform(0, self.most)
        try:
            time.sleep(pause)
            with self._lock:  # scripts keep logs and queues; serialise the call itself
                return self.script(messages, seed)
        finally:
            with self._lock:
                self.in_flight -= 1
