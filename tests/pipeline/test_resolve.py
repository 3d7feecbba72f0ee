"""§4 override checks, stage resolution and credential binding (`check_overrides`, `resolve`, `bind_key`)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from adapter_critic import Config, RequestError
from adapter_critic.core import Plan, StageTarget
from adapter_critic.pipeline.resolve import bind_key, check_overrides, resolve
from adapter_critic.request.decode import Overrides, decode_request
from adapter_critic.workflows import registry
from adapter_critic.workflows.base import NoSettings

from ..conftest import CLIENT_KEY, UPSTREAM_URL
from ..conftest import make_config as scripted_config
from ..helpers import forwarding_config

A = "http://a.test/v1"
B = "https://b.test/v1"
C = "http://c.test/v1"
D = "http://d.test/v1"  # configured once, with a trailing slash, by a target naming no api_key_env
ELSEWHERE = "http://elsewhere.test/v1"  # configured nowhere

# File order matters for credential binding: served models in order; api, adapter, critic within each.
# A is configured three times with three different keys; the first (no api_key_env -> default) wins for overrides.
DATA: dict[str, Any] = {
    "default_api_key_env": "DEFAULT_KEY",
    "served_models": {
        "plain": {"mode": "direct", "api": {"model": "plain-api", "base_url": A}},
        "adapt": {
            "mode": "adapter",
            "api": {"model": "adapt-api", "base_url": B + "/", "api_key_env": "B_KEY", "options": {"seed": 1}},
            "adapter": {
                "model": "adapt-rev",
                "base_url": A,
                "api_key_env": "A_ADAPTER_KEY",
                "options": {"temperature": 0},
            },
            "max_adapter_retries": 2,
            "adapter_system_prompt": "custom adapter prompt",
        },
        "crit": {
            "mode": "critic",
            "api": {"model": "crit-api", "base_url": C, "api_key_env": "C_KEY", "options": {"top_p": 0.9}},
            "critic": {"model": "crit-rev", "base_url": D + "/", "options": {"temperature": 0.3}},
            "on_review_error": "fail",
            "critic_system_prompt": "custom critic prompt",
        },
        "lonely": {
            "mode": "direct",
            "api": {"model": "lonely-api", "base_url": A + "/", "api_key_env": "A_LONELY_KEY", "options": {"n": 1}},
        },
        "dup": {
            "mode": "critic",
            "api": {"model": "dup-api", "base_url": B, "api_key_env": "B_DUP_KEY"},
            "critic": {"model": "dup-rev", "base_url": C, "api_key_env": "C_CRITIC_KEY"},
        },
    },
}


def stage_of(plan: Plan, role: str) -> StageTarget | None:
    """The target of the stage `role` when the plan's mode uses it (falling back to the API target), else None."""
    if role == "api":
        return plan.api
    return plan.target(role) if role in registry.get(plan.mode).targets else None


def make_config(**top: Any) -> Config:
    return Config.from_dict({**DATA, **top})


CONFIG = make_config()


def rejected(call: Any, *args: Any, **kwargs: Any) -> RequestError:
    with pytest.raises(RequestError) as info:
        call(*args, **kwargs)
    return info.value


# --- check_overrides -------------------------------------------------------------------------------------------------


def test_no_overrides_is_always_fine() -> None:
    check_overrides(make_config(allow_overrides=False), None)


@pytest.mark.parametrize(
    "overrides",
    [Overrides(), Overrides(mode="direct"), Overrides(api_model="x"), Overrides(api_base_url=A)],
)
def test_allow_overrides_false_rejects_any_override_block(overrides: Overrides) -> None:
    config = make_config(allow_overrides=False)
    error = rejected(check_overrides, config, overrides)
    assert error.status_code == 400
    assert error.error_type == "invalid_request_error"
    assert error.param == "x_adapter_critic"
    assert "allow_overrides" in error.message


def test_allow_overrides_false_names_where_the_block_came_from() -> None:
    error = rejected(check_overrides, make_config(allow_overrides=False), Overrides(), "extra_body.x_adapter_critic")
    assert error.param == "extra_body.x_adapter_critic"


@pytest.mark.parametrize("url", [A, A + "/", B, B + "/", C, D, D + "/"])
@pytest.mark.parametrize("field", ["api_base_url", "adapter_base_url", "critic_base_url"])
def test_configured_urls_are_allowed_with_or_without_trailing_slash(field: str, url: str) -> None:
    check_overrides(CONFIG, Overrides(**{field: url}))


@pytest.mark.parametrize(
    "url", [ELSEWHERE, "http://a.test", "http://a.test/v2", "https://a.test/v1", "http://a.test/v1/x", "/v1"]
)
@pytest.mark.parametrize("field", ["api_base_url", "adapter_base_url", "critic_base_url"])
def test_unconfigured_urls_are_rejected(field: str, url: str) -> None:
    error = rejected(check_overrides, CONFIG, Overrides(**{field: url}))
    assert error.status_code == 400
    assert error.param == f"x_adapter_critic.{field}"
    assert url in error.message
    assert "allowed_override_base_urls" in error.message


def test_every_base_url_is_checked_not_just_the_first() -> None:
    error = rejected(check_overrides, CONFIG, Overrides(api_base_url=A, adapter_base_url=B, critic_base_url=ELSEWHERE))
    assert error.param == "x_adapter_critic.critic_base_url"


@pytest.mark.parametrize("listed", [ELSEWHERE, ELSEWHERE + "/"])
@pytest.mark.parametrize("given", [ELSEWHERE, ELSEWHERE + "/"])
def test_allowed_override_base_urls_entries(listed: str, given: str) -> None:
    config = make_config(allowed_override_base_urls=[listed])
    check_overrides(config, Overrides(critic_base_url=given))
    assert rejected(check_overrides, config, Overrides(critic_base_url="http://other.test/v1")).status_code == 400


@pytest.mark.parametrize("url", [ELSEWHERE, "https://anything.example/v1/", "http://93.184.216.34:1234"])
def test_star_allows_any_internet_url(url: str) -> None:
    check_overrides(make_config(allowed_override_base_urls=["*"]), Overrides(api_base_url=url))


def test_base_url_of_an_unused_stage_is_still_checked() -> None:
    # "plain" is direct mode and has no adapter/critic: the override block is reusable, but not a way around the list.
    with pytest.raises(RequestError) as info:
        check_overrides(CONFIG, Overrides(adapter_base_url=ELSEWHERE))
    assert info.value.param == "x_adapter_critic.adapter_base_url"


def test_override_checks_need_no_served_model_and_come_before_the_404() -> None:
    """§4 order: override checks (400) before the served-model lookup (404), as the service calls them."""
    request = decode_request(
        b'{"model": "no-such-model", "messages": [{"role": "user", "content": "x"}],'
        b' "x_adapter_critic": {"api_base_url": "http://elsewhere.test/v1"}}'
    )
    assert request.overrides is not None
    assert rejected(check_overrides, CONFIG, request.overrides).status_code == 400
    assert rejected(check_overrides, make_config(allow_overrides=False), request.overrides).status_code == 400
    # Had the override been fine, the same request would be a 404.
    assert rejected(resolve, CONFIG, request.model, Overrides(api_base_url=A)).status_code == 404


def test_unknown_served_model_is_404_before_resolution_errors() -> None:
    # A partial target for a stage with no configured target would be a 400 -- but the model lookup comes first.
    error = rejected(resolve, CONFIG, "nope", Overrides(mode="critic", critic_model="x"))
    assert error.status_code == 404
    assert error.code == "model_not_found"
    assert error.param == "model"
    assert error.error_type == "invalid_request_error"
    assert "'nope'" in error.message
    assert "plain" in error.message


# --- resolve -------------------------------------------------------------------------------------------------------


def test_direct_plan_without_overrides() -> None:
    plan = resolve(CONFIG, "plain", None)
    assert plan == Plan(
        served_id="plain",
        mode="direct",
        api=StageTarget(model="plain-api", base_url=A, key_env="DEFAULT_KEY", options={}),
        settings=NoSettings(),
    )
    assert stage_of(plan, "adapter") is None
    assert stage_of(plan, "critic") is None


def test_adapter_plan_without_overrides() -> None:
    plan = resolve(CONFIG, "adapt", None)
    assert plan.mode == "adapter"
    assert plan.api == StageTarget(model="adapt-api", base_url=B, key_env="B_KEY", options={"seed": 1})
    assert stage_of(plan, "adapter") == StageTarget(
        model="adapt-rev", base_url=A, key_env="A_ADAPTER_KEY", options={"temperature": 0}
    )
    assert stage_of(plan, "critic") is None
    assert plan.settings.max_adapter_retries == 2
    assert plan.on_review_error == "draft"
    assert plan.settings.adapter_system_prompt == "custom adapter prompt"


def test_critic_plan_without_overrides() -> None:
    plan = resolve(CONFIG, "crit", None)
    assert plan.mode == "critic"
    assert plan.api == StageTarget(model="crit-api", base_url=C, key_env="C_KEY", options={"top_p": 0.9})
    # No api_key_env of its own: the default key, bound to its own URL.
    assert stage_of(plan, "critic") == StageTarget(
        model="crit-rev", base_url=D, key_env="DEFAULT_KEY", options={"temperature": 0.3}
    )
    assert stage_of(plan, "adapter") is None
    assert plan.on_review_error == "fail"
    assert plan.settings.critic_system_prompt == "custom critic prompt"


def test_empty_overrides_change_nothing() -> None:
    for served_id in CONFIG.served_models:
        assert resolve(CONFIG, served_id, Overrides()) == resolve(CONFIG, served_id, None)


@pytest.mark.parametrize(("served_id", "mode"), [("plain", "critic"), ("adapt", "direct"), ("crit", "adapter")])
def test_mode_override(served_id: str, mode: Any) -> None:
    plan = resolve(CONFIG, served_id, Overrides(mode=mode))
    assert plan.mode == mode
    assert (stage_of(plan, "adapter") is not None) == (mode == "adapter")
    assert (stage_of(plan, "critic") is not None) == (mode == "critic")


def test_api_model_override_keeps_url_key_and_options() -> None:
    plan = resolve(CONFIG, "adapt", Overrides(api_model="other-model"))
    assert plan.api == StageTarget(model="other-model", base_url=B, key_env="B_KEY", options={"seed": 1})


def test_api_base_url_override_keeps_model_and_options_and_rebinds_the_key() -> None:
    plan = resolve(CONFIG, "adapt", Overrides(api_base_url=C + "/"))
    # C is first configured as crit.api with C_KEY.
    assert plan.api == StageTarget(model="adapt-api", base_url=C, key_env="C_KEY", options={"seed": 1})


def test_reviewer_override_keeps_its_own_options() -> None:
    plan = resolve(CONFIG, "crit", Overrides(critic_model="m2", critic_base_url=B))
    assert stage_of(plan, "critic") == StageTarget(
        model="m2", base_url=B, key_env="B_KEY", options={"temperature": 0.3}
    )
    plan = resolve(CONFIG, "adapt", Overrides(adapter_model="m3"))
    assert stage_of(plan, "adapter") == StageTarget(
        model="m3", base_url=A, key_env="A_ADAPTER_KEY", options={"temperature": 0}
    )


@pytest.mark.parametrize(("mode", "stage"), [("adapter", "adapter"), ("critic", "critic")])
def test_missing_reviewer_falls_back_to_the_resolved_api_target(mode: Any, stage: str) -> None:
    plan = resolve(CONFIG, "lonely", Overrides(mode=mode))
    expected = StageTarget(model="lonely-api", base_url=A, key_env="A_LONELY_KEY", options={"n": 1})
    assert plan.api == expected
    assert stage_of(plan, stage) == expected
    # The fallback follows the API overrides: model, URL, key and options of the *resolved* api target.
    plan = resolve(CONFIG, "lonely", Overrides(mode=mode, api_model="big", api_base_url=C))
    expected = StageTarget(model="big", base_url=C, key_env="C_KEY", options={"n": 1})
    assert plan.api == expected
    assert stage_of(plan, stage) == expected


def test_reviewer_of_a_configured_mode_falls_back_too() -> None:
    plan = resolve(CONFIG, "plain", Overrides(mode="adapter"))
    assert stage_of(plan, "adapter") == plan.api == StageTarget(model="plain-api", base_url=A, key_env="DEFAULT_KEY")


@pytest.mark.parametrize(
    ("mode", "given", "missing"),
    [
        ("adapter", {"adapter_model": "x"}, "adapter_base_url"),
        ("adapter", {"adapter_base_url": A}, "adapter_model"),
        ("critic", {"critic_model": "x"}, "critic_base_url"),
        ("critic", {"critic_base_url": C}, "critic_model"),
    ],
)
def test_partial_override_for_a_stage_without_a_configured_target_is_400(
    mode: Any, given: dict[str, Any], missing: str
) -> None:
    error = rejected(resolve, CONFIG, "lonely", Overrides(mode=mode, **given))
    assert error.status_code == 400
    assert error.param == f"x_adapter_critic.{missing}"
    assert next(iter(given)) in error.message
    error = rejected(resolve, CONFIG, "lonely", Overrides(mode=mode, **given), "extra_body.x_adapter_critic")
    assert error.param == f"extra_body.x_adapter_critic.{missing}"


@pytest.mark.parametrize(
    "given",
    [{"adapter_model": "x"}, {"adapter_base_url": A}, {"critic_model": "x"}, {"critic_base_url": ELSEWHERE}],
)
def test_overrides_for_unused_stages_are_ignored(given: dict[str, Any]) -> None:
    plan = resolve(CONFIG, "lonely", Overrides(**given))
    assert plan == resolve(CONFIG, "lonely", None)


@pytest.mark.parametrize(("mode", "stage"), [("adapter", "adapter"), ("critic", "critic")])
def test_wholly_overridden_reviewer_gets_no_options(mode: Any, stage: str) -> None:
    overrides = Overrides(mode=mode, **{f"{stage}_model": "rev", f"{stage}_base_url": B + "/"})
    plan = resolve(CONFIG, "lonely", overrides)
    # B is first configured as adapt.api with B_KEY; the config's options of that target do not come along.
    assert stage_of(plan, stage) == StageTarget(model="rev", base_url=B, key_env="B_KEY", options={})
    assert plan.api.options == {"n": 1}


def test_wholly_overridden_reviewer_on_an_unconfigured_url_gets_no_key() -> None:
    overrides = Overrides(mode="critic", critic_model="rev", critic_base_url=ELSEWHERE)
    plan = resolve(make_config(allowed_override_base_urls=["*"]), "lonely", overrides)
    assert stage_of(plan, "critic") == StageTarget(model="rev", base_url=ELSEWHERE, key_env=None, options={})


@pytest.mark.parametrize(("override", "expected"), [(None, 2), (0, 0), (5, 5)])
def test_max_adapter_retries_override(override: int | None, expected: int) -> None:
    assert resolve(CONFIG, "adapt", Overrides(max_adapter_retries=override)).settings.max_adapter_retries == expected


# --- bind_key ------------------------------------------------------------------------------------------------------


def test_bind_key() -> None:
    adapt = CONFIG.served_models["adapt"]
    lonely = CONFIG.served_models["lonely"]
    # Own URL: own key, even when another target with the same URL comes first in the file.
    assert bind_key(CONFIG, A, lonely.api) == "A_LONELY_KEY"
    assert bind_key(CONFIG, A + "/", lonely.api) == "A_LONELY_KEY"
    assert bind_key(CONFIG, B, adapt.api) == "B_KEY"
    # Another URL: the first configured target with that URL, in file order.
    assert bind_key(CONFIG, A, adapt.api) == "DEFAULT_KEY"
    assert bind_key(CONFIG, A, None) == "DEFAULT_KEY"
    assert bind_key(CONFIG, B + "/", None) == "B_KEY"
    assert bind_key(CONFIG, C, lonely.api) == "C_KEY"
    assert bind_key(CONFIG, D, None) == "DEFAULT_KEY"
    # Nowhere in the config: no key at all.
    assert bind_key(CONFIG, ELSEWHERE, adapt.api) is None
    assert bind_key(CONFIG, ELSEWHERE, None) is None
    assert bind_key(CONFIG, "http://a.test", None) is None


# --- credential binding, exhaustively ------------------------------------------------------------------------------


def _norm(url: str) -> str:
    return url.rstrip("/")


# An independent oracle, computed from the raw config data, not from Config's helpers.
FILE_ORDER: list[tuple[str, str, dict[str, Any]]] = [
    (served_id, stage, served[stage])
    for served_id, served in DATA["served_models"].items()
    for stage in ("api", "adapter", "critic")
    if stage in served
]


def _key_of(target: dict[str, Any]) -> str:
    key: str = target.get("api_key_env") or DATA["default_api_key_env"]
    return key


KEYS_BY_URL: dict[str, set[str]] = {}
for _served_id, _stage, _target in FILE_ORDER:
    KEYS_BY_URL.setdefault(_norm(_target["base_url"]), set()).add(_key_of(_target))


def _first_key(url: str) -> str | None:
    for _, _, target in FILE_ORDER:
        if _norm(target["base_url"]) == url:
            return _key_of(target)
    return None


URL_CHOICES = [A, A + "/", B, B + "/", C, C + "/", D, D + "/", ELSEWHERE]
FIELDS: dict[str, list[Any]] = {
    "mode": ["direct", "adapter", "critic"],
    "api_model": ["override-model"],
    "api_base_url": URL_CHOICES,
    "adapter_model": ["override-model"],
    "adapter_base_url": URL_CHOICES,
    "critic_model": ["override-model"],
    "critic_base_url": URL_CHOICES,
}


def _all_overrides() -> list[dict[str, Any]]:
    """Every subset of the 7 override fields, each field present taking every value of its choices."""
    choices = [[None, *values] for values in FIELDS.values()]
    return [
        {name: value for name, value in zip(FIELDS, combo, strict=True) if value is not None}
        for combo in itertools.product(*choices)
    ]


ALL_OVERRIDES = _all_overrides()


def _expected_stage(
    served_id: str, stage: str, given: dict[str, Any], api: StageTarget | None
) -> StageTarget | type[RequestError] | None:
    """What §4 says the stage resolves to; `RequestError` for a partial target; None if the caller falls back."""
    own = DATA["served_models"][served_id].get(stage)
    model, url = given.get(f"{stage}_model"), given.get(f"{stage}_base_url")
    if own is None:
        if model is None and url is None:
            return api  # fallback: the resolved API target, key and options included
        if model is None or url is None:
            return RequestError
        return StageTarget(model=model, base_url=_norm(url), key_env=_first_key(_norm(url)), options={})
    own_url = _norm(own["base_url"])
    stage_url = _norm(url) if url is not None else own_url
    key = _key_of(own) if stage_url == own_url else _first_key(stage_url)
    return StageTarget(
        model=model if model is not None else own["model"],
        base_url=stage_url,
        key_env=key,
        options=own.get("options", {}),
    )


@pytest.mark.parametrize("allowlist", [["*"], []])
@pytest.mark.parametrize("served_id", list(DATA["served_models"]))
def test_no_override_sends_a_configured_key_to_an_unconfigured_url(served_id: str, allowlist: list[str]) -> None:
    """Every subset of the 7 override fields, over configured URLs (with and without a trailing slash) and a URL
    configured nowhere: each resolved stage's key env is one configured for exactly that stage URL, and it is the
    one §4 picks (own URL -> own key; otherwise the first configured target with that URL; otherwise none)."""
    config = make_config(allowed_override_base_urls=allowlist)
    assert len(ALL_OVERRIDES) == 4 * 2 * 10 * 2 * 10 * 2 * 10
    checked = rejected_by_allowlist = rejected_as_partial = 0
    for given in ALL_OVERRIDES:
        overrides = Overrides(**given)
        uses_elsewhere = any(_norm(u) == ELSEWHERE for u in overrides.base_urls().values())
        if not allowlist and uses_elsewhere:
            with pytest.raises(RequestError):
                check_overrides(config, overrides)
            rejected_by_allowlist += 1
            continue
        check_overrides(config, overrides)

        mode = given.get("mode", DATA["served_models"][served_id]["mode"])
        expected_api = _expected_stage(served_id, "api", given, None)
        assert isinstance(expected_api, StageTarget)
        expected: dict[str, Any] = {"api": expected_api, "adapter": None, "critic": None}
        if mode != "direct":
            expected[mode] = _expected_stage(served_id, mode, given, expected_api)
        if mode != "direct" and expected[mode] is RequestError:
            with pytest.raises(RequestError) as info:
                resolve(config, served_id, overrides)
            assert info.value.status_code == 400, given
            rejected_as_partial += 1
            continue

        plan = resolve(config, served_id, overrides)
        assert plan.mode == mode
        for stage in ("api", "adapter", "critic"):
            target: StageTarget | None = stage_of(plan, stage)
            if target is not None:
                # The security property itself, stated without the oracle: a key env only ever goes to a URL it
                # is configured with, and nothing at all to a URL configured nowhere.
                allowed_keys = KEYS_BY_URL.get(_norm(target.base_url), set())
                assert target.key_env is None or target.key_env in allowed_keys, (given, stage, target)
                if _norm(target.base_url) == ELSEWHERE:
                    assert target.key_env is None, (given, stage, target)
            assert target == expected[stage], (given, stage)
        checked += 1
    assert checked > 1000
    assert (rejected_by_allowlist > 0) == (not allowlist)
    assert rejected_as_partial > 0  # every served model here lacks at least one reviewer target


# -- forwarding the caller's credentials -------------------------------------------------------------------------------


def test_forwarding_targets_never_bind_the_servers_key() -> None:
    config = forwarding_config()
    assert bind_key(config, UPSTREAM_URL, None) is None
    plan = resolve(config, "m-forward", None, client_token=CLIENT_KEY)
    assert plan.api.forward_client_authorization and plan.api.key_env is None
    assert "critic" in plan.targets and not plan.target("critic").forward_client_authorization
    assert plan.target("critic").client_token is None  # the caller's token is kept only where it goes
    assert CLIENT_KEY not in repr(plan)


def test_fallbacks_bind_forwarding_to_their_own_url() -> None:
    primary = {"model": "a", "base_url": "http://primary.test/v1", "api_key_env": "PRIMARY_KEY"}
    primary["fallbacks"] = [
        {"model": "b", "base_url": "http://own-keys.test/v1", "forward_client_authorization": True},
        {"model": "c", "base_url": "http://backup.test/v1", "api_key_env": "BACKUP_KEY"},
    ]
    config = scripted_config(served_models={"m": {"mode": "direct", "api": primary}})
    plan = resolve(config, "m", None, client_token=CLIENT_KEY)
    assert (plan.api.key_env, plan.api.client_token) == ("PRIMARY_KEY", None)
    forwarding, backup = plan.api.fallbacks
    assert forwarding.forward_client_authorization and forwarding.client_token == CLIENT_KEY
    assert forwarding.key_env is None
    assert (backup.key_env, backup.client_token) == ("BACKUP_KEY", None)
