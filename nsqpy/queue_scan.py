# nsqd's queue-scan loop: in-flight timeouts and deferred deliveries, by sampling.
#
# Strategy (nsqd/nsqd.go queueScanLoop, after Redis's expiry algorithm): every
# --queue-scan-interval (100 ms) pick --queue-scan-selection-count (20) channels at random,
# process their in-flight and deferred queues, and go again at once while more than
# --queue-scan-dirty-percent (25%) of the picked channels had work. The channel list is refreshed
# every --queue-scan-refresh-interval (5 s); unlike nsqd we also refresh as soon as a channel is
# created or deleted, so a new channel's timeouts are never up to 5 s late. An idle daemon with
# 10,000 channels looks at 20 of them per tick, not all.
#
# nsqd spreads the picked channels over a worker pool (0.25 x channels, 1 to
# --queue-scan-worker-pool-max goroutines). Here channel work is synchronous on the event loop;
# the pool size becomes the number of channels processed between yields to the loop, so a long
# dirty pass never holds up client I/O for more than a few channels' worth of work.
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

    def scan_once(self, chans: Sequence[Channel]) -> tuple[int, int]:
        """One sampling pass over ``chans``: returns (picked, dirty)."""
        num = min(self.opts.queue_scan_selection_count, len(chans))
        if num == 0:
            return 0, 0
        dirty = sum(_process(chans[i]) for i in self._rng.sample(range(len(chans)), num))
        self.passes += 1
        return num, dirty

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
                num = min(opts.queue_scan_selection_count, len(chans))
                picked = self._rng.sample(range(len(chans)), num)
                dirty = 0
                for k in range(0, num, step):
                    dirty += sum(_process(chans[i]) for i in picked[k : k + step])
                    if k + step < num:
                        await asyncio.sleep(0)
                self.passes += 1
                if dirty / num <= opts.queue_scan_dirty_percent:
                    break
                await asyncio.sleep(0)
