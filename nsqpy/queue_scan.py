"""nsqd's queue-scan loop: in-flight timeouts and deferred deliveries, by sampling.

Strategy (nsqd/nsqd.go queueScanLoop, after Redis's expiry algorithm): every
--queue-scan-interval (100 ms) pick --queue-scan-selection-count (20) channels at random,
process their in-flight and deferred queues, and go again at once while more than
--queue-scan-dirty-percent (25%) of the picked channels had work. The channel list is refreshed
every --queue-scan-refresh-interval (5 s); unlike nsqd we also refresh as soon as a channel is
created or deleted, so a new channel's timeouts are never up to 5 s late. An idle daemon with
10,000 channels looks at 20 of them per tick, not all.

nsqd spreads the picked channels over a worker pool (0.25 x channels, 1 to
--queue-scan-worker-pool-max goroutines). Here channel work is synchronous on the event loop;
the pool size becomes the number of channels processed between yields to the loop, so a long
dirty pass never holds up client I/O for more than a few channels' worth of work."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence

from .channel import Channel
from .options import Options


def pool_size(num_channels: int, pool_max: int) -> int:
    """nsqd's resizePool: 25% of the channel count, clamped to [1, pool_max]."""
    ideal = int(num_channels * 0.25)
    return max(1, min(ideal, pool_max))


def _process(c: Channel) -> bool:
    """Process one channel's in-flight and deferred queues; True if either had work."""
    in_flight_dirty = c.process_in_flight()
    return c.process_deferred() or in_flight_dirty


class QueueScanner:
    """Runs the sampling loop; ``channels()`` returns the current channel list and
    ``version()`` a number that changes whenever that list does."""

    def __init__(
        self,
        opts: Options,
        channels: Callable[[], Sequence[Channel]],
        version: Callable[[], int],
        rng: random.Random | None = None,
    ) -> None:
        self.opts = opts
        self._get_channels = channels
        self._get_version = version
        self._rng = rng or random.Random()
        self.passes = 0  # sampling passes run (for tests and stats)

    def pick(self, chans: Sequence[Channel]) -> list[Channel]:
        """One pass's sample: --queue-scan-selection-count channels at random (all if fewer)."""
        num = min(self.opts.queue_scan_selection_count, len(chans))
        return [chans[i] for i in self._rng.sample(range(len(chans)), num)]

    def again(self, picked: int, dirty: int) -> bool:
        """nsqd's rule: repeat at once while more than --queue-scan-dirty-percent of the picked
        channels had work."""
        return picked > 0 and dirty / picked > self.opts.queue_scan_dirty_percent

    def scan_once(self, chans: Sequence[Channel]) -> tuple[int, int]:
        """One sampling pass over ``chans`` without yielding: returns (picked, dirty)."""
        picked = self.pick(chans)
        dirty = sum(_process(c) for c in picked)
        self.passes += 1
        return len(picked), dirty

    async def run(self) -> None:
        opts = self.opts
        interval = opts.queue_scan_interval_ms / 1000
        refresh_ns = opts.queue_scan_refresh_interval_ms * 1_000_000
        loop = asyncio.get_running_loop()
        chans: list[Channel] = []
        seen_version = -1
        last_refresh = 0
        while True:
            await asyncio.sleep(interval)
            now = int(loop.time() * 1e9)
            v = self._get_version()
            if v != seen_version or now - last_refresh >= refresh_ns:
                chans = list(self._get_channels())
                seen_version = v
                last_refresh = now
            if not chans:
                continue
            step = pool_size(len(chans), opts.queue_scan_worker_pool_max)
            while True:
                picked = self.pick(chans)
                dirty = 0
                for k in range(0, len(picked), step):
                    dirty += sum(_process(c) for c in picked[k : k + step])
                    if k + step < len(picked):
                        await asyncio.sleep(0)  # between "workers": let client I/O run
                self.passes += 1
                if not self.again(len(picked), dirty):
                    break
                await asyncio.sleep(0)
