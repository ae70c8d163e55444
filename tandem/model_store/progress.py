"""Progress of a long fetch or push: a live bar on a terminal, a line a second in a log."""

import sys
import threading
import time


class Progress:
    """A fetch's progress on stderr: a live bar (rich) on a terminal; in a log, `fetching … 120/480 MB (95 MB/s)` at
    most once a second. Either way the last line is `fetched …: N/N MB (R MB/s)`."""

    def __init__(
        self, what: str, total_bytes: int, stream=None, verbs: tuple[str, str] = ("fetching", "fetched")
    ) -> None:
        self.what, self.total, self.done = what, total_bytes, 0
        self._verbs = verbs  # while at it, and once done
        self._stream = stream or sys.stderr
        self._started = self._shown = time.monotonic()
        self._lock = threading.Lock()
        self._bar = None
        if self._stream.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, TimeRemainingColumn, TransferSpeedColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(
                "[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                TimeRemainingColumn(), console=Console(file=self._stream), transient=True,
            )  # fmt: skip
            self._task = self._bar.add_task(f"{verbs[0]} {what}", total=total_bytes)
            self._bar.start()

    def add(self, n: int) -> None:
        with self._lock:  # called from the transfer threads
            self.done += n
            now = time.monotonic()
            if self._bar is not None:
                self._bar.update(self._task, completed=self.done)
            elif now - self._shown >= 1.0:
                self._shown = now
                self._print(now)

    def finish(self) -> float:
        elapsed = time.monotonic() - self._started
        if self._bar is not None:
            self._bar.stop()
        self._print(time.monotonic(), final=True)
        return elapsed

    def _print(self, now: float, final: bool = False) -> None:
        mb = 2**20
        rate = self.done / mb / max(now - self._started, 1e-6)
        verb = self._verbs[1] if final else self._verbs[0]
        print(f"{verb} {self.what}: {self.done / mb:.0f}/{self.total / mb:.0f} MB ({rate:.0f} MB/s)", file=self._stream)
