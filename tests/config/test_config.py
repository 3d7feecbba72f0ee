"""`load_config` from real TOML/JSON/YAML files, the §2 defaults, and one actionable `ConfigError` per mistake."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter_critic import Config, ConfigError, create_app, load_config
from adapter_critic.config import require_absolute_urls

from ..conftest import KEYS_ENV, make_config
from ..helpers import direct_toml

SPEC_EXAMPLE_TOML = """\
default_api_key_env = "OPENAI_API_KEY"   # env var read for a stage that names none
timeout_seconds = 120                    # per upstream call

[served_models.served-critic]
mode = "critic"
api    = { model = "Qwen/Qwen3-8B", base_url = "http://127.0.0.1:8000/v1" }
critic = { model = "gpt-4.1-mini", base_url = "https://api.openai.com/v1", api_key_env = "OPENAI_API_KEY", options = { temperature = 0 } }
critic_system_prompt = "You are a meticulous reviewer..."   # optional; defaults live in the package
"""  # noqa: E501 -- verbatim from SPEC §2

API = {"model": "api-model", "base_url": "http://127.0.0.1:8000/v1"}


def minimal() -> dict[str, Any]:
    return {"served_models": {"m": {"mode": "direct", "api": dict(API)}}}


def full() -> dict[str, Any]:
    """A config that sets every key, the same data in every format."""
    return {
        "default_api_key_env": "MY_DEFAULT_KEY",
        "timeout_seconds": 30.5,
        "allow_overrides": False,
        "allowed_override_base_urls": ["https://proxy.example/v1"],
        "max_body_bytes": 1024,
        "keepalive_seconds": 2.5,
        "served_models": {
            "first": {
                "mode": "adapter",
                "api": {"model": "api-model", "base_url": "http://127.0.0.1:8000/v1", "options": {"seed": 7}},
                "adapter": {
                    "model": "adapter-model",
                    "base_url": "https://api.openai.com/v1",
                    "api_key_env": "ADAPTER_KEY",
                    "options": {"temperature": 0, "nested": {"a": [1, 2]}},
                },
                "adapter_system_prompt": "adapter prompt",
                "max_adapter_retries": 10,
                "on_review_error": "fail",
            },
            "second": {
                "mode": "critic",
                "api": {"model": "api-2", "base_url": "http://127.0.0.1:9000/v1"},
                "critic": {"model": "critic-model", "base_url": "https://api.openai.com/v1"},
                "critic_system_prompt": "critic prompt",
            },
        },
    }


FULL_TOML = """\
default_api_key_env = "MY_DEFAULT_KEY"
timeout_seconds = 30.5
allow_overrides = false
allowed_override_base_urls = ["https://proxy.example/v1"]
max_body_bytes = 1024
keepalive_seconds = 2.5

[served_models.first]
mode = "adapter"
api = { model = "api-model", base_url = "http://127.0.0.1:8000/v1", options = { seed = 7 } }
adapter_system_prompt = "adapter prompt"
max_adapter_retries = 10
on_review_error = "fail"

[served_models.first.adapter]
model = "adapter-model"
base_url = "https://api.openai.com/v1"
api_key_env = "ADAPTER_KEY"
options = { temperature = 0, nested = { a = [1, 2] } }

[served_models.second]
mode = "critic"
api = { model = "api-2", base_url = "http://127.0.0.1:9000/v1" }
critic = { model = "critic-model", base_url = "https://api.openai.com/v1" }
critic_system_prompt = "critic prompt"
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def write_json(tmp_path: Path, data: Any, name: str = "config.json") -> Path:
    return write(tmp_path, name, json.dumps(data))


def config_error(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    # One error, not a chain of them: no exception context is shown along with it.
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__ or info.value.__context__ is None
    return message


# --- loading ---------------------------------------------------------------------------------------------------------


def test_spec_toml_example_loads(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "config.toml", SPEC_EXAMPLE_TOML))
    assert config.default_api_key_env == "OPENAI_API_KEY"
    assert config.timeout_seconds == 120
    assert list(config.served_models) == ["served-critic"]
    served = config.served_models["served-critic"]
    assert served.mode == "critic"
    assert (served.api.model, served.api.base_url, served.api.api_key_env) == (
        "Qwen/Qwen3-8B",
        "http://127.0.0.1:8000/v1",
        None,
    )
    assert served.targets.get("critic") is not None
    assert served.targets.get("critic").model == "gpt-4.1-mini"
    assert served.targets.get("critic").base_url == "https://api.openai.com/v1"
    assert served.targets.get("critic").api_key_env == "OPENAI_API_KEY"
    assert served.targets.get("critic").options == {"temperature": 0}
    assert served.settings["critic_system_prompt"] == "You are a meticulous reviewer..."
    assert served.targets.get("adapter") is None


def _assert_full(config: Config) -> None:
    assert config.default_api_key_env == "MY_DEFAULT_KEY"
    assert config.timeout_seconds == 30.5
    assert config.allow_overrides is False
    assert config.allowed_override_base_urls == ["https://proxy.example/v1"]
    assert config.max_body_bytes == 1024
    assert config.keepalive_seconds == 2.5
    assert list(config.served_models) == ["first", "second"]  # file order is kept (§4 credential binding)
    first = config.served_models["first"]
    assert first.mode == "adapter"
    assert first.api.options == {"seed": 7}
    assert first.targets.get("adapter") is not None
    assert first.targets.get("adapter").model == "adapter-model"
    assert first.targets.get("adapter").api_key_env == "ADAPTER_KEY"
    assert first.targets.get("adapter").options == {"temperature": 0, "nested": {"a": [1, 2]}}
    assert first.settings["adapter_system_prompt"] == "adapter prompt"
    assert first.settings["max_adapter_retries"] == 10
    assert first.on_review_error == "fail"
    second = config.served_models["second"]
    assert second.mode == "critic"
    assert second.targets.get("critic") is not None
    assert second.targets.get("critic").model == "critic-model"
    assert second.settings["critic_system_prompt"] == "critic prompt"


@pytest.mark.parametrize(
    ("name", "render"),
    [
        ("config.toml", lambda data: FULL_TOML),
        ("config.json", json.dumps),
        ("config.yaml", yaml.safe_dump),
        ("config.yml", yaml.safe_dump),
        ("CONFIG.TOML", lambda data: FULL_TOML),
        ("Config.Json", json.dumps),
    ],
)
def test_every_format_loads_the_same_keys(tmp_path: Path, name: str, render: Any) -> None:
    path = write(tmp_path, name, render(full()))
    _assert_full(load_config(path))
    _assert_full(load_config(str(path)))


def test_the_three_formats_give_equal_configs(tmp_path: Path) -> None:
    from_toml = load_config(write(tmp_path, "c.toml", FULL_TOML))
    from_json = load_config(write(tmp_path, "c.json", json.dumps(full())))
    from_yaml = load_config(write(tmp_path, "c.yaml", yaml.safe_dump(full())))
    assert from_toml == from_json == from_yaml


def test_json_compat_form_with_api_key_var_alias(tmp_path: Path) -> None:
    original = {
        "served_models": {
            "served-adapter": {
                "mode": "adapter",
                "api": {"model": "local", "base_url": "http://127.0.0.1:8000/v1", "api_key_var": "LOCAL_KEY"},
                "adapter": {"model": "gpt-4.1-mini", "base_url": "https://api.openai.com/v1", "api_key_var": "OAI"},
                "adapter_system_prompt": "Reply lgtm or edits.",
            }
        }
    }
    config = load_config(write_json(tmp_path, original))
    served = config.served_models["served-adapter"]
    assert served.api.api_key_env == "LOCAL_KEY"
    assert served.targets.get("adapter") is not None
    assert served.targets.get("adapter").api_key_env == "OAI"
    assert config.key_env_for(served.api) == "LOCAL_KEY"
    assert config.key_env_for(served.targets.get("adapter")) == "OAI"
    assert config.key_env_names() == {"OPENAI_API_KEY", "LOCAL_KEY", "OAI"}


def test_api_key_var_and_api_key_env_may_both_be_given_if_equal(tmp_path: Path) -> None:
    data = minimal()
    data["served_models"]["m"]["api"].update(api_key_env="K", api_key_var="K")
    assert load_config(write_json(tmp_path, data)).served_models["m"].api.api_key_env == "K"


def test_api_key_var_disagreeing_with_api_key_env_is_an_error(tmp_path: Path) -> None:
    data = minimal()
    data["served_models"]["m"]["api"].update(api_key_env="K1", api_key_var="K2")
    message = config_error(write_json(tmp_path, data))
    assert "served_models.m.api" in message
    assert "api_key_var" in message


def test_defaults(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "config.toml",
        direct_toml("http://127.0.0.1:8000/v1"),
    )
    config = load_config(path)
    assert config.default_api_key_env == "OPENAI_API_KEY"
    assert config.timeout_seconds == 120
    assert config.allow_overrides is True
    assert config.allowed_override_base_urls == []
    assert config.max_body_bytes == 33554432
    assert config.keepalive_seconds == 10
    served = config.served_models["m"]
    assert served.targets.get("adapter") is None
    assert served.targets.get("critic") is None
    assert served.settings == {}
    assert served.on_review_error == "draft"
    assert served.api.api_key_env is None
    assert served.api.options == {}
    assert config.key_env_for(served.api) == "OPENAI_API_KEY"


def test_targets_are_listed_in_file_order(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "c.toml", FULL_TOML))
    assert [t.model for t in config.targets()] == ["api-model", "adapter-model", "api-2", "critic-model"]


def test_load_config_accepts_a_relative_base_url(tmp_path: Path) -> None:
    data = minimal()
    data["served_models"]["m"]["api"]["base_url"] = "/v1"
    assert load_config(write_json(tmp_path, data)).served_models["m"].api.base_url == "/v1"


@pytest.mark.parametrize("retries", [0, 10])
def test_max_adapter_retries_bounds_are_inclusive(tmp_path: Path, retries: int) -> None:
    data = minimal()
    data["served_models"]["m"]["max_adapter_retries"] = retries
    assert load_config(write_json(tmp_path, data)).served_models["m"].settings["max_adapter_retries"] == retries


# --- one ConfigError naming the file and the key path ----------------------------------------------------------------


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        data = data[part]
    data[last] = value


def _delete(data: dict[str, Any], path: str) -> None:
    *parents, last = path.split(".")
    for part in parents:
        data = data[part]
    del data[last]


DELETE = object()

# (key to set in the minimal config, value, key path the message must name, other words the message must contain)
MISTAKES: list[tuple[str, Any, str, tuple[str, ...]]] = [
    ("bogus", 1, "bogus", ("unknown key", "served_models", "default_api_key_env")),
    ("served_models.m.bogus", 1, "served_models.m.bogus", ("unknown key", "max_adapter_retries")),
    ("served_models.m.api.bogus", 1, "served_models.m.api.bogus", ("unknown key", "base_url", "api_key_env")),
    ("served_models.m.critic", {**API, "key": "x"}, "served_models.m.critic.key", ("unknown key",)),
    ("served_models.m.api.options", [], "served_models.m.api.options", ("object",)),
    ("served_models.m.api.model", 5, "served_models.m.api.model", ("str",)),
    ("served_models.m.api.model", "", "served_models.m.api.model", ()),
    ("served_models.m.api.base_url", "", "served_models.m.api.base_url", ()),
    ("served_models.m.api.base_url", DELETE, "served_models.m.api.base_url", ("missing",)),
    ("served_models.m.api.model", DELETE, "served_models.m.api.model", ("missing",)),
    ("served_models.m.api", DELETE, "served_models.m.api", ("missing",)),
    ("served_models.m.mode", DELETE, "served_models.m.mode", ("missing",)),
    ("served_models.m.api", "http://x/v1", "served_models.m.api", ("object",)),
    ("served_models.m", 3, "served_models.m", ("object",)),
    ("served_models.m.mode", "chain", "served_models.m.mode", ("'direct'", "'adapter'", "'critic'")),
    ("served_models.m.mode", 1, "served_models.m.mode", ()),
    ("served_models.m.max_adapter_retries", 11, "served_models.m.max_adapter_retries", ("10",)),
    ("served_models.m.max_adapter_retries", -1, "served_models.m.max_adapter_retries", ("0",)),
    ("served_models.m.max_adapter_retries", True, "served_models.m.max_adapter_retries", ("bool",)),
    ("served_models.m.max_adapter_retries", "2", "served_models.m.max_adapter_retries", ("int",)),
    ("served_models.m.on_review_error", "retry", "served_models.m.on_review_error", ("'draft'", "'fail'")),
    ("served_models.m.adapter_system_prompt", 1, "served_models.m.adapter_system_prompt", ("str",)),
    ("served_models", {}, "served_models", ("at least one served model",)),
    ("served_models", [], "served_models", ("object",)),
    ("served_models", DELETE, "served_models", ("missing",)),
    ("timeout_seconds", "slow", "timeout_seconds", ()),
    ("timeout_seconds", 0, "timeout_seconds", ()),
    ("keepalive_seconds", -1, "keepalive_seconds", ()),
    ("max_body_bytes", 0, "max_body_bytes", ()),
    ("allow_overrides", "yes", "allow_overrides", ("bool",)),
    ("allowed_override_base_urls", "*", "allowed_override_base_urls", ("array",)),
    ("allowed_override_base_urls", ["*", 1], "allowed_override_base_urls[1]", ("str",)),
    ("default_api_key_env", None, "default_api_key_env", ()),
]


@pytest.mark.parametrize(("key", "value", "key_path", "words"), MISTAKES)
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_each_mistake_is_one_error_naming_file_and_key_path(
    tmp_path: Path, fmt: str, key: str, value: Any, key_path: str, words: tuple[str, ...]
) -> None:
    data = copy.deepcopy(minimal())
    if value is DELETE:
        _delete(data, key)
    else:
        _set(data, key, value)
    text = json.dumps(data) if fmt == "json" else yaml.safe_dump(data)
    message = config_error(write(tmp_path, f"config.{fmt}", text))
    assert f": {key_path}: " in message, message
    for word in words:
        assert word in message, message
    assert "\n" not in message
    assert "Traceback" not in message


SERVED = '[served_models.m]\nmode = "direct"\napi = { model = "x", base_url = "http://h/v1" }\n'


@pytest.mark.parametrize(
    ("toml", "key_path"),
    [
        ('bogus = 1\n[served_models.m]\nmode = "direct"\napi = { model = "x", base_url = "http://h/v1" }\n', "bogus"),
        (
            '[served_models.m]\nmode = "direct"\napi = { model = "x", base_url = "http://h/v1", token = "t" }\n',
            "served_models.m.api.token",
        ),
        (
            '[served_models.m]\nmode = "serial"\napi = { model = "x", base_url = "http://h/v1" }\n',
            "served_models.m.mode",
        ),
        ('[served_models.m]\nmode = "direct"\n', "served_models.m.api"),
        ("[served_models]\n", "served_models"),
        (
            'timeout_seconds = "1"\n'
            '[served_models.m]\nmode = "direct"\napi = { model = "x", base_url = "http://h/v1" }\n',
            "timeout_seconds",
        ),
        (
            '[served_models.m]\nmode = "critic"\napi = { model = "x", base_url = "http://h/v1" }\n'
            '[served_models.m.critic]\nmodel = "c"\nbase_url = 5\n',
            "served_models.m.critic.base_url",
        ),
        (SERVED + '[prices."gpt-4.1*"]\ninput = -1\noutput = 1\n', 'prices."gpt-4.1*".input'),
        (SERVED + '[prices."gpt-4.1"]\ninput = 1\n', 'prices."gpt-4.1".output'),
        (SERVED + '[prices."gpt-4.1"]\ninput = 1\noutput = 2\ncache = 0.5\n', 'prices."gpt-4.1".cache'),
        (SERVED + '[prices."gpt-4.1"]\ninput = inf\noutput = 2\n', 'prices."gpt-4.1"'),
        (SERVED + '[prices]\n"" = { input = 1, output = 2 }\n', "prices"),
        (SERVED + '[pricing]\ncurrency = ""\n', "pricing.currency"),
    ],
)
def test_toml_mistakes_name_file_and_key_path(tmp_path: Path, toml: str, key_path: str) -> None:
    message = config_error(write(tmp_path, "config.toml", toml))
    assert f": {key_path}: " in message, message


def test_served_model_ids_that_are_not_strings_are_named(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, "config.yaml", "served_models:\n  1:\n    mode: direct\n"))
    assert "served_models" in message
    assert "1" in message


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("config.toml", "served_models = {\n", ("TOML",)),
        ("config.toml", "[served_models.m]\nmode = direct\n", ("TOML", "line 2")),
        ("config.json", '{"served_models": ', ("JSON",)),
        ("config.yaml", "served_models: [unclosed\n", ("YAML",)),
        ("config.json", "[1, 2]", ("top level",)),
        ("config.yaml", "", ("top level",)),
    ],
)
def test_unparsable_files_name_the_file_and_the_format(tmp_path: Path, name: str, text: str, words: tuple[str]) -> None:
    message = config_error(write(tmp_path, name, text))
    for word in words:
        assert word in message, message


def test_a_toml_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b'default_api_key_env = "\xff"\n')
    assert "TOML" in config_error(path)


@pytest.mark.parametrize("name", ["config.ini", "config.conf", "config"])
def test_unknown_extension(tmp_path: Path, name: str) -> None:
    message = config_error(write(tmp_path, name, json.dumps(minimal())))
    assert ".toml" in message
    assert ".json" in message


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    message = config_error(path)
    assert "cannot read" in message


def test_a_directory_is_not_a_config_file(tmp_path: Path) -> None:
    path = tmp_path / "dir.toml"
    path.mkdir()
    config_error(path)


# --- relative URLs: accepted by load_config, refused by create_app ----------------------------------------------------


@pytest.mark.parametrize("stage", ["api", "adapter", "critic"])
def test_require_absolute_urls_names_file_key_path_and_middleware(tmp_path: Path, stage: str) -> None:
    data = minimal()
    data["served_models"]["m"].update(mode="critic", adapter=dict(API), critic=dict(API))
    data["served_models"]["m"][stage]["base_url"] = "/v1"
    path = write_json(tmp_path, data)
    config = load_config(path)
    with pytest.raises(ConfigError) as info:
        require_absolute_urls(config, str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert f"served_models.m.{stage}.base_url" in message
    assert "'/v1'" in message
    assert "AdapterCriticMiddleware" in message


def test_require_absolute_urls_accepts_absolute_urls(tmp_path: Path) -> None:
    require_absolute_urls(load_config(write(tmp_path, "c.toml", FULL_TOML)), "c.toml")


def test_create_app_refuses_a_relative_url_from_a_file(tmp_path: Path) -> None:
    data = minimal()
    data["served_models"]["m"]["api"]["base_url"] = "/v1"
    path = write_json(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        create_app(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "served_models.m.api.base_url" in message
    assert "AdapterCriticMiddleware" in message


@pytest.mark.parametrize("given", [str, Path, load_config], ids=["str", "path", "loaded"])
def test_create_app_names_the_file_of_a_relative_url(tmp_path: Path, given: Any) -> None:
    data = minimal()
    data["served_models"]["m"]["api"]["base_url"] = "/v1"
    path = write_json(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        create_app(given(path))
    assert str(info.value).startswith(f"{path}: served_models.m.api.base_url: ")
    assert "<config>" not in str(info.value)


def test_create_app_refuses_a_relative_url_in_a_config_object() -> None:
    data = minimal()
    data["served_models"]["m"]["api"]["base_url"] = "/v1"
    with pytest.raises(ConfigError, match=r"served_models\.m\.api\.base_url.*AdapterCriticMiddleware"):
        create_app(Config.from_dict(data))


def test_create_app_reports_an_invalid_file_as_config_error(tmp_path: Path) -> None:
    path = write_json(tmp_path, {"served_models": {}})
    with pytest.raises(ConfigError, match="at least one served model"):
        create_app(path)


def test_from_dict_names_its_source() -> None:
    with pytest.raises(ConfigError) as info:
        Config.from_dict({"served_models": {"m": {"mode": "direct"}}}, source="inline")
    assert str(info.value).startswith("inline: served_models.m.api: ")


# -- keys and limits ---------------------------------------------------------------------------------------------------


def test_forwarding_and_inbound_auth_cannot_be_combined() -> None:
    data = {
        "auth_api_keys_env": KEYS_ENV,
        "served_models": {
            "m": {
                "mode": "direct",
                "api": {"model": "x", "base_url": "http://a.test", "forward_client_authorization": True},
            }
        },
    }
    with pytest.raises(ConfigError, match=r"served_models\.m\.api\.forward_client_authorization cannot be used"):
        Config.from_dict(data)


def test_inbound_keys_need_their_own_env_var() -> None:
    with pytest.raises(ConfigError, match="also holds an upstream API key"):
        make_config(auth_api_keys_env="OPENAI_API_KEY")


def test_limits_are_validated() -> None:
    for key in ("max_messages", "max_upstream_response_bytes"):
        with pytest.raises(ConfigError, match=key):
            make_config(**{key: 0})
    with pytest.raises(ConfigError, match="auth_api_keys_env"):
        make_config(auth_api_keys_env="")
