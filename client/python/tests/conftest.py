"""A real graftd for the tests: started once per session on kernel-chosen loopback ports (as
tests/server/ does), killed afterwards. GRAFTD names the binary (ctest sets it to the build's);
by default build/server/graftd of this checkout."""

import os
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SOURCE_DIR = Path(os.environ.get("GRAFT_SOURCE_DIR", HERE.parents[2]))
sys.path.insert(0, str(HERE))  # the models helper

import graft_client  # noqa: E402  (needs PYTHONPATH=<build>/client/python)
from graftd_process import GraftdProcess  # noqa: E402


class Graftd(GraftdProcess):
    def __init__(self, *args):
        super().__init__(SOURCE_DIR, *args)

    def wait_serving(self, client):
        for _ in range(200):
            try:
                if client.health(timeout=2) == "SERVING":
                    return
            except graft_client.UnavailableError:
                pass
            time.sleep(0.05)
        pytest.fail(f"graftd never reported SERVING:\n{self.log_text()}")


@pytest.fixture(scope="session")
def graftd():
    server = Graftd("--workers", "2")
    with graft_client.Client(server.address, timeout=60) as client:
        server.wait_serving(client)
    yield server
    server.stop()


@pytest.fixture
def client(graftd):
    with graft_client.Client(graftd.address, timeout=60) as c:
        yield c


@pytest.fixture
def fake_server():
    """start(answer, lookup_answer=None) -> (FakeGraft, target); stopped after the test."""
    from fakes import start_fake
    servers = []

    def start(answer, lookup_answer=None):
        server, fake, target = start_fake(answer, lookup_answer)
        servers.append(server)
        return fake, target

    yield start
    for server in servers:
        server.stop(None)


@pytest.fixture(scope="session")
def input_digest_server(graftd, tmp_path_factory):
    """Skips unless the graftd under test reports external files' sha256 (the server side of
    the input-digest protocol); an older one sends every file back without it."""
    folder = tmp_path_factory.mktemp("probe")
    from models import external_model
    path, _, _ = external_model(folder, seed=590)
    with graft_client.Client(graftd.address, timeout=60) as c:
        result = c.optimize(path, lookup_first=False)
    if not result.report.external_files or not result.report.external_files[0].sha256:
        pytest.skip("this graftd does not report sha256 for external files yet (the server "
                    "side of the input-digest protocol, proto 8d5bc9f, is not in this build)")
    return graftd
