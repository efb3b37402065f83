"""A graftd process for the tests (client/python/tests and install_test): started on
kernel-chosen loopback ports, as tests/server/ does, its log in a temporary file, killed by
stop(). GRAFTD names the binary (ctest sets it to the build's); by default build/server/graftd of
the checkout. Imports nothing of graft_client, so the install test can use it too."""

import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

READY = re.compile(r"serving grpc=([0-9.]+:[0-9]+)")


class GraftdProcess:
    def __init__(self, source_dir, *args):
        binary = os.environ.get("GRAFTD", str(Path(source_dir) / "build" / "server" / "graftd"))
        if not os.access(binary, os.X_OK):
            pytest.fail(f"graftd not found at {binary}: build it or set GRAFTD")
        self.log = tempfile.NamedTemporaryFile(prefix="graftd_pytest_", suffix=".log",
                                               delete=False)
        self.process = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", *args],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        self.address = None
        for _ in range(400):  # the start-up line names the bound port
            match = READY.search(self.log_text())
            if match:
                self.address = match.group(1)
                break
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        if self.address is None:
            self.stop()
            pytest.fail(f"graftd did not start:\n{self.log_text()}")

    def log_text(self):
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self.log.close()
        if os.path.exists(self.log.name):
            os.unlink(self.log.name)
