import pytest

from hub_server import HubServer, configure_client


@pytest.fixture
def hub_server(tmp_path, monkeypatch):
    """A Hub-compatible server on 127.0.0.1 that ``huggingface_hub`` (and timm/transformers through it)
    talks to for the duration of the test; see ``tests/hub_server.py``."""
    with HubServer(tmp_path / "hub-server") as server:
        configure_client(server, tmp_path / "hf-home", monkeypatch)
        yield server
    assert not server.errors, "hub test server failed:\n" + "\n".join(server.errors)
