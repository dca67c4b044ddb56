"""The capacity tests' sim: in this process (tests/in_process_sim.py) with a profile of known capacity."""

import pytest
from capacity_support import PROFILE
from in_process_sim import InProcessSim


@pytest.fixture
def profile(tmp_path):
    path = tmp_path / "known.toml"
    path.write_text(PROFILE)
    return path


@pytest.fixture
def sim(profile):
    server = InProcessSim(str(profile))
    yield server.start()
    server.stop()
