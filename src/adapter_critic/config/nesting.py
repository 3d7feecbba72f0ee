"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Checking the served models that run other served models' workflows as stages, when the config loads: every
reference names a served model (or a prefixed one, `[models]`), none leads back to where it started, and none nests
more than `MAX_NESTING` deep. A request can then never start a run that calls itself."""

from __future__ import annotations

from .models import MAX_NESTING, ModelTables, prefix_upstream


def check_nesting(config: ModelTables) -> None:
    """Raise ValueError, naming the key path and the served models involved, when a reference does not resolve, is
    a cycle or nests too deep (a path is written `served model a → critic → b → api → a`)."""
    _check_models_table(config)
    depths: dict[str, tuple[int, list[str]]] = {}
    for served_id in config.served_models:
        depth, path = _deepest(config, served_id, [served_id], depths)
        if depth > MAX_NESTING:
            raise ValueError(
                f"served_models.{served_id}: served model {' → '.join(path)} nests {depth} served models deep; at "
                f"most {MAX_NESTING} are allowed"
            )


def _deepest(
    config: ModelTables, served_id: str, path: list[str], depths: dict[str, tuple[int, list[str]]]
) -> tuple[int, list[str]]:
    """How deep `served_id` nests, and its deepest path (`[id, stage, id, stage, id…]`) starting with `path`."""
    known = depths.get(served_id)
    if known is not None:
        return known[0], [*path, *known[1][1:]]
    served = config.served(served_id)
    assert served is not None
    deepest, longest = 0, path
    for stage, child in served.references():
        where = [*path, stage, child]
        if child in path[::2]:
            first = path[::2].index(child) * 2
            raise ValueError(
                f"served_models.{path[-1] if path[-1] in config.served_models else path[0]}.{stage}: served model "
                f"{' → '.join(where[first:])} is a cycle: a served model cannot run itself as a stage"
            )
        if config.served(child) is None:
            raise ValueError(
                f"served_models.{served_id}.{stage}: {child!r} is not a served model of this config (nor a prefixed "
                "model of [models])"
            )
        depth, below = _deepest(config, child, where, depths)
        if depth + 1 > deepest:
            deepest, longest = depth + 1, below
    depths[served_id] = (deepest, longest[len(path) - 1 :])
    return deepest, longest


def _check_models_table(config: ModelTables) -> None:
    models = config.models
    if models.upstream is not None:
        served = config.served_models.get(models.upstream)
        if served is None or served.api is None:
            raise ValueError(
                f"models.upstream: {models.upstream!r} must name a served model of this config whose `api` is a "
                "target table"
            )
    if models.technique_prefixes and prefix_upstream(config) is None:
        raise ValueError(
            "models.technique_prefixes: prefixed models need an upstream to call: set models.upstream to a served "
            "model (its api target's upstream), or configure passthrough"
        )


def forwards_caller_key(config: ModelTables, served_id: str) -> bool:
    """Whether a run of `served_id` (a served model or a prefixed one) may send the caller's own key upstream: a
    target of it, or of a served model it runs, has `forward_client_authorization`."""
    seen: set[str] = set()
    todo = [served_id]
    while todo:
        current = todo.pop()
        served = config.served(current)
        if current in seen or served is None:
            continue
        seen.add(current)
        primaries = [t for t in (served.api, *served.targets.values()) if t is not None]
        if any(t.forward_client_authorization for p in primaries for t in (p, *p.fallbacks)):
            return True
        todo.extend(child for _, child in served.references())
    return False
