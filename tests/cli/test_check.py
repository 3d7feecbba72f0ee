"""`adapter-critic check` (and `serve`'s config check) through Click's runner."""

from __future__ import annotations

from pathlib import Path

from ..conftest import RemoteUpstream
from .conftest import config_file, invoke, one_error_line
from .test_process import closed_port


def test_check_validates_and_lists_the_demo() -> None:
    result = invoke("check")
    assert result.exit_code == 0
    assert "demo-critic" in result.stdout and "config OK: the built-in demo" in result.stdout


def test_deep_check_reports_every_target(tmp_path: Path, remote: RemoteUpstream) -> None:
    config = config_file(tmp_path, remote.reset().url, a={"mode": "critic", "model": "model-a", "critic": "judge"})
    result = invoke("check", "--config", str(config), "--deep")
    assert result.exit_code == 0, result.stderr
    assert "a.api" in result.stdout and "a.critic" in result.stdout and "HTTP 200" in result.stdout
    assert "every upstream answers" in result.stdout
    assert [call["path"] for call in remote.calls()] == ["/v1/models"]  # one probe per URL and key


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
    relative.write_text('[served_models.x]\nmode = "direct"\napi = { model = "m", base_url = "/v1" }\n')
    assert "relative URL" in one_error_line(invoke("check", "-c", str(relative)))
    # The config may also come from the environment, as for the standalone server.
    assert "base_ur" in one_error_line(invoke("check", env={"ADAPTER_CRITIC_CONFIG": str(bad)}))
