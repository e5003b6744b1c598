"""A child process that reports what it does as JSON lines: the harness the tests that need a
runtime in another process share."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
import time
from typing import Any


class JsonLinesChild:
    """A child started with ``argv``; each JSON line it prints arrives on a queue."""

    def __init__(self, argv: list[str], *, stdin: bool = False) -> None:
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.put(json.loads(raw))

    def expect(self, key: str, timeout: float = 20) -> dict[str, Any]:
        """The next line that holds ``key``; fails with the child's stderr if none comes."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                err = ""
                if self.process.poll() is not None and self.process.stderr is not None:
                    err = self.process.stderr.read()
                raise AssertionError(f"the child never said {key!r}; stderr: {err}") from None
            if key in line:
                return line

    def kill(self) -> None:
        """SIGKILL it (waking it first if it was stopped)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGCONT)
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        """Kill it if it still runs, and close its pipes."""
        if self.process.poll() is None:
            self.kill()
        self.reader.join(10)
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
