"""`adapter-critic check` (and `serve`'s config check) through Click's runner."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ..conftest import RemoteUpstream
from ..helpers import direct_toml
from .conftest import config_file, invoke, one_error_line
from .test_process import closed_port


def test_check_validates_and_lists_the_demo() -> None:
    result = invoke("check")
    assert result.exit_code == 0
    assert "demo-critic" in result.stdout and "config OK: the built-in demo" in result.stdout


def test_deep_check_reports_every_target(tmp_path: Path, remote: RemoteUpstream) -> None:
    served = {
        "a": {"mode": "critic", "model": "model-a", "critic": "judge"},
        "b": {"mode": "direct", "model": "upstream-model"},
    }
    config = config_file(tmp_path, remote.reset().url, **served)
    result = invoke("check", "--config", str(config), "--deep")
    assert result.exit_code == 0, result.stderr
    rows = {line.split()[1]: line for line in result.stdout.splitlines() if line.startswith("│ ")}
    assert "HTTP 200, listed by /models" in rows["b.api"]  # the upstream's GET /models lists upstream-model
    for where in ("a.api", "a.critic"):  # it does not list model-a nor judge, which answer a one-token call
        assert "a 1-token call answered" in rows[where] and " ok " in rows[where]
    assert "every upstream serves its model" in result.stdout
    calls = remote.calls()
    assert [call["path"] for call in calls if call["method"] == "GET"] == ["/v1/models"]  # one probe per URL and key
    asked = sorted((call["body"]["model"], call["body"]["max_tokens"]) for call in calls if call["method"] == "POST")
    assert asked == [("judge", 1), ("model-a", 1)]


def test_deep_check_fails_when_the_upstream_does_not_serve_the_model(tmp_path: Path, remote: RemoteUpstream) -> None:
    remote.reset().script({"status": 404, "body": json.dumps({"error": {"message": "model 'gone' not found"}})})
    config = config_file(tmp_path, remote.url, x={"mode": "direct", "model": "gone"})
    result = invoke("check", "-c", str(config), "--deep")
    assert result.exit_code == 1
    said = " ".join(result.stdout.split())  # the table's cells may wrap
    assert "'gone' not served: GET /models does not list it" in said and "answered HTTP 404" in said
    assert one_error_line(result) == "Error: 1 of 1 targets failed the deep check: x.api"


class _AnythingGoes(BaseHTTPRequestHandler):
    """A web server that is no model server: HTTP 200 and a page, whatever is asked."""

    def answer(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        page = b"<html><body>It works!</body></html>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    do_GET = do_POST = answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def web_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AnythingGoes)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_200_from_something_else_on_the_port_is_not_ok(tmp_path: Path, web_server: str) -> None:
    config = config_file(tmp_path, web_server, x={"mode": "direct", "model": "m"})
    result = invoke("check", "-c", str(config), "--deep")
    assert result.exit_code == 1
    said = " ".join(result.stdout.split())
    assert "'m' not confirmed: GET /models lists no models" in said and "did not answer with" in said
    assert one_error_line(result) == "Error: 1 of 1 targets failed the deep check: x.api"


def test_deep_check_fails_on_an_unreachable_upstream(tmp_path: Path) -> None:
    port = closed_port()
    config = config_file(tmp_path, f"http://127.0.0.1:{port}", x={"mode": "direct", "model": "m"})
    result = invoke("check", "-c", str(config), "--deep")
    assert result.exit_code == 1
    assert f"could not connect to 127.0.0.1:{port} (connection refused)" in result.stdout
    assert one_error_line(result) == "Error: 1 of 1 targets failed the deep check: x.api"


def test_invalid_config_is_one_line_for_check_and_serve(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[served_models.x]\nmode = "direct"\napi = { model = "m", base_ur = "http://h/v1" }\n')
    for command in ("check", "serve"):
        result = invoke(command, "-c", str(bad))
        assert "served_models.x.api.base_ur: unknown key" in one_error_line(result)
    relative = tmp_path / "relative.toml"
    relative.write_text(direct_toml("/v1", name="x", model="m"))
    assert "relative URL" in one_error_line(invoke("check", "-c", str(relative)))
    # The config may also come from the environment, as for the standalone server.
    assert "base_ur" in one_error_line(invoke("check", env={"ADAPTER_CRITIC_CONFIG": str(bad)}))
