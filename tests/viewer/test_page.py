"""The viewer's route (`GET /ui` under the mount): where it is served, its Content-Security-Policy, inbound auth,
and its assets shipped inside the package (issue 14)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from adapter_critic import create_app
from adapter_critic.http.app import build_app
from adapter_critic.http.create import create_standalone_app
from adapter_critic.service.compose import compose

from ..conftest import asgi_client, make_config

pytestmark = pytest.mark.anyio

KEYS_ENV = "VIEWER_TEST_KEYS"
ROOT = Path(__file__).parents[2]
STATIC = ROOT / "src" / "adapter_critic" / "viewer" / "static"


def csp_directives(response: httpx.Response) -> dict[str, str]:
    policy = response.headers["content-security-policy"]
    return {part.split()[0]: " ".join(part.split()[1:]) for part in policy.split(";") if part.strip()}


async def test_standalone_serves_the_page_under_v1_with_a_strict_csp() -> None:
    async with asgi_client(create_standalone_app(make_config())) as client:
        response = await client.get("/v1/ui")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    csp = csp_directives(response)
    assert csp["default-src"] == "'none'"
    assert csp["script-src"] == "'self'"  # no 'unsafe-inline', no 'unsafe-eval', no other origin
    assert csp["style-src"] == "'self'"
    assert csp["connect-src"] == "'self'"
    assert csp["frame-ancestors"] == "'none'"
    assert csp["require-trusted-types-for"] == "'script'"
    assert csp["trusted-types"] == "'none'"
    assert response.headers["x-content-type-options"] == "nosniff"
    page = response.text
    assert '<meta name="adapter-critic-root" content="/v1">' in page
    assert '<script type="module" src="/v1/ui/app.js"></script>' in page
    # Nothing inline: every <script> has a src, and no element carries an event handler or a style attribute.
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", page) == []
    assert not re.search(r"\son[a-z]+=", page)
    assert " style=" not in page
    assert "http://" not in page and "https://" not in page  # no CDN, nothing from elsewhere


async def test_every_asset_is_served_with_its_type_and_the_csp() -> None:
    names = sorted(p.name for p in STATIC.iterdir() if p.name != "index.html")
    assert {"app.js", "diff.js", "dom.js", "style.css"} <= set(names)
    types = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
    async with asgi_client(create_standalone_app(make_config())) as client:
        for name in names:
            response = await client.get(f"/v1/ui/{name}")
            assert response.status_code == 200, name
            assert response.content == (STATIC / name).read_bytes()
            assert response.headers["content-type"] == types[Path(name).suffix]
            assert "script-src 'self'" in response.headers["content-security-policy"]
        missing = await client.get("/v1/ui/evil.js")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "The viewer has no asset 'evil.js'; open /v1/ui."


def test_no_script_writes_html() -> None:
    """Model text must reach the page as text only: no HTML sink, no eval, in any of the viewer's scripts."""
    for script in STATIC.glob("*.js"):
        code = script.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert sink not in code, f"{script.name} uses {sink}"


async def test_a_mounted_app_has_no_viewer_unless_the_config_turns_it_on() -> None:
    async with asgi_client(create_app(make_config())) as client:
        assert (await client.get("/ui")).status_code == 404
    async with asgi_client(create_app(make_config(ui={"enabled": True}))) as client:
        assert (await client.get("/ui")).status_code == 200
    async with asgi_client(create_standalone_app(make_config(ui={"enabled": False}))) as client:
        assert (await client.get("/v1/ui")).status_code == 404


async def test_mounted_under_a_host_path_the_page_points_at_its_mount() -> None:
    sub = create_app(make_config(ui={"enabled": True}))
    host = Starlette(routes=[Mount("/tools/llm", app=sub)])
    async with asgi_client(host) as client:
        page = (await client.get("/tools/llm/ui")).text
        script = await client.get("/tools/llm/ui/app.js")
    assert '<meta name="adapter-critic-root" content="/tools/llm">' in page
    assert '<link rel="stylesheet" href="/tools/llm/ui/style.css">' in page
    assert script.status_code == 200


async def test_under_inbound_auth_the_page_is_public_and_the_data_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEYS_ENV, "viewer-key")
    app = build_app(compose(make_config(auth_api_keys_env=KEYS_ENV), standalone=True), prefix="/v1")
    async with asgi_client(app) as client:
        page = await client.get("/v1/ui")
        script = await client.get("/v1/ui/api.js")
        unknown = await client.get("/v1/ui/nothing.js")
        models = await client.get("/v1/models")
        with_key = await client.get("/v1/models", headers={"authorization": "Bearer viewer-key"})
    assert page.status_code == 200 and "viewer-key" not in page.text  # the shell holds no data and no key
    assert script.status_code == 200
    assert "sessionStorage.getItem(KEY)" in script.text  # the key lives in the tab, never in local storage
    assert "localStorage" not in script.text
    assert unknown.status_code == 401  # only the viewer's own files are public
    assert models.status_code == 401
    assert with_key.status_code == 200


def test_the_wheel_ships_the_viewer(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for asset in STATIC.iterdir():
        assert f"adapter_critic/viewer/static/{asset.name}" in names
