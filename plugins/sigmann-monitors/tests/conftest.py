import pytest


@pytest.fixture
def run_file(sigma_run_file):
    """The testing kit's blobs run file, unchanged; tests append tables to it."""
    return sigma_run_file()
