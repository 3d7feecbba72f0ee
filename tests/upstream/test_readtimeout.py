"""aiohttp's read timeout with its timer moved lazily: it still fires once nothing was read for the timeout, and a
read costs no timer. It builds on aiohttp's private names: the installed aiohttp is within the range pyproject.toml
pins, and one without those names fails here rather than passing over the subclass in silence."""

from __future__ import annotations

import functools
import logging
import tomllib
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement

from adapter_critic.upstream import readtimeout
from adapter_critic.upstream.readtimeout import LazyReadTimeout, lazy_read_timeouts, missing
from adapter_critic.upstream.transport import AiohttpTransport


class _Timer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self._when, self.callback, self.cancelled = when, callback, False

    def when(self) -> float:
        return self._when

    def cancel(self) -> None:
        self.cancelled = True


class _Clock:
    """The loop as the handler's timeout uses it: a clock moved by hand, and the timers set on it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[_Timer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> _Timer:
        self.timers.append(_Timer(when, callback))
        return self.timers[-1]

    def run_until(self, now: float) -> None:
        """Move the clock to `now`, firing every live timer due by then in order."""
        while due := sorted((t for t in self.timers if not t.cancelled and t.when() <= now), key=_Timer.when):
            self.now = due[0].when()
            due[0].cancelled = True  # fired
            due[0].callback()
        self.now = now


def handler(clock: _Clock, timeout: float) -> tuple[LazyReadTimeout, list[float]]:
    protocol = LazyReadTimeout(loop=clock)  # type: ignore[arg-type]
    protocol.read_timeout = timeout
    timed_out: list[float] = []
    protocol._on_read_timeout = lambda: timed_out.append(clock.now)  # type: ignore[method-assign]
    return protocol, timed_out


def test_reads_within_the_timeout_set_one_timer_and_it_fires_when_nothing_came_for_the_timeout() -> None:
    clock = _Clock()
    protocol, timed_out = handler(clock, 1.0)
    protocol.start_timeout()
    for at in (0.25, 0.5, 0.75, 1.25, 1.5):  # a read every quarter of a second: longer in all than the timeout
        clock.run_until(at)
        protocol._reschedule_timeout()  # what each read does
    assert timed_out == []
    assert len(clock.timers) == 2  # one at the start, one more when the first fired early: none per read
    clock.run_until(2.49)
    assert timed_out == []
    clock.run_until(10.0)
    assert timed_out == [2.5]  # the last read's time plus the timeout


def test_a_shorter_timeout_is_not_left_waiting_for_a_longer_ones_timer() -> None:
    clock = _Clock()
    protocol, timed_out = handler(clock, 60.0)
    protocol.start_timeout()
    protocol.read_timeout = 1.0
    protocol._reschedule_timeout()
    clock.run_until(5.0)
    assert timed_out == [1.0]


def test_no_timeout_means_no_timer() -> None:
    clock = _Clock()
    protocol, timed_out = handler(clock, 1.0)
    protocol.start_timeout()
    protocol.read_timeout = None
    protocol._reschedule_timeout()
    clock.run_until(10.0)
    assert timed_out == [] and all(t.cancelled for t in clock.timers)


@pytest.mark.anyio
async def test_the_network_transports_connections_time_out_lazily() -> None:
    transport = AiohttpTransport(limits=httpx.Limits(max_connections=4))
    try:
        assert transport._session().connector._factory.func is LazyReadTimeout  # type: ignore[union-attr]
    finally:
        await transport.aclose()
    assert lazy_read_timeouts(object()) is False  # not a connector as expected: left alone


def test_the_installed_aiohttp_has_every_private_name_the_lazy_timeout_builds_on() -> None:
    gone = missing()
    assert gone == [], (
        f"aiohttp {version('aiohttp')} lacks {', '.join(gone)}, which upstream/readtimeout.py builds on: its "
        "connections would keep a timer per read. Adapt LazyReadTimeout (and measure it: benchmarks/paced.py), or "
        "remove it, before allowing this aiohttp in pyproject.toml."
    )


def test_the_installed_aiohttp_is_one_pyproject_toml_allows_in_both_extras_that_install_it() -> None:
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    pins = {
        extra: [
            str(r.specifier) for r in map(Requirement, project["optional-dependencies"][extra]) if r.name == "aiohttp"
        ]
        for extra in ("server", "dev")
    }
    assert pins["server"] == pins["dev"] and len(pins["server"]) == 1, pins
    [specifier] = pins["server"]
    assert "<" in specifier, "an upper bound: a later aiohttp may drop the private names"
    assert Requirement(f"aiohttp{specifier}").specifier.contains(version("aiohttp")), (version("aiohttp"), specifier)


class _Renamed:
    """An aiohttp handler whose private names are not those the lazy timeout builds on."""

    def __init__(self, loop: object) -> None:
        self._loop, self._timeout_handle = loop, None

    def _drop_timeout(self) -> None: ...


def test_an_aiohttp_without_the_private_names_is_named_and_its_handler_kept(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(readtimeout, "ResponseHandler", _Renamed)
    gone = missing()
    assert gone == ["_reschedule_timeout", "_on_read_timeout", "_read_timeout", "_read_timeout_handle"]

    class Connector:
        _factory = functools.partial(_Renamed, loop=None)

    monkeypatch.setattr(readtimeout, "_missing", gone)
    connector = Connector()
    with caplog.at_level(logging.WARNING, logger="adapter_critic"):
        assert lazy_read_timeouts(connector) is False
    assert connector._factory.func is _Renamed  # its own handler, not a subclass that would fail at the first read
    assert "this aiohttp lacks _reschedule_timeout, _on_read_timeout" in caplog.text
