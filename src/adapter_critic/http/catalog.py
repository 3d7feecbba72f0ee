"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The app's `GET` routes beside the protocols' `POST` ones (docs/reference/http.md): the model list and a model
(what the caller's key may see), `/health` (deep: behind the key), token counting, the runs API, a key's usage and
`/metrics`.
"""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..pipeline.resolve import unknown_model, why_not_served
from ..protocols.openai.render import JSON, encode, error_response
from ..service.compose import Service
from .auth import CALLER, InboundAuth
from .count_tokens import count_tokens_routes
from .fastpath import ASGIEndpoint
from .health import DeepHealth
from .keys import keys_routes
from .lessons import lessons_routes
from .models import model_object
from .passthrough import Passthrough
from .runs import runs_routes
from .shadows import shadows_routes
from .telemetry import metrics_endpoint

_HEALTH = encode({"status": "ok"})


def api_routes(service: Service, auth: InboundAuth, prefix: str, passthrough: Passthrough | None) -> list[Route]:
    """Every `GET` route of the app under `prefix` (and `/metrics`), the passthrough's catch-all aside."""
    config = service.config
    created = int(time.time())
    model_objects = {served_id: model_object(served_id, created) for served_id in config.served_models}
    models_body = encode({"object": "list", "data": list(model_objects.values())})
    model_bodies = {served_id: encode(model) for served_id, model in model_objects.items()}

    policy = service.chat.policy  # a key with `models` sees only those (docs/guides/security.md#tenants)

    async def models(request: Request) -> Response:
        caller = request.scope.get(CALLER)
        if policy.bounded(caller):  # its own served models only: the passthrough's are not for it
            own = [model_objects[served_id] for served_id in policy.visible(caller, model_objects)]
            return Response(encode({"object": "list", "data": own}), media_type=JSON)
        if passthrough is None:
            return Response(models_body, media_type=JSON)
        merged = await passthrough.models(list(model_objects.values()))
        return Response(encode({"object": "list", "data": merged}), media_type=JSON)

    async def model(scope: Scope, receive: Receive, send: Send) -> None:
        served_id: str = scope["path_params"]["model"]
        caller = scope.get(CALLER)
        allowed = not policy.any_bounds or policy.allows(caller, served_id)
        body = model_bodies.get(served_id) if allowed else None
        if body is None and allowed and config.serves(served_id):  # a prefixed model (`[models]`): never listed
            body = encode(model_object(served_id, created))
        if body is not None:
            await Response(body, media_type=JSON)(scope, receive, send)
        elif passthrough is not None and not config.serves(served_id) and not passthrough.bounded(scope):
            await passthrough.relay(scope, receive, send, f"/models/{served_id}")
        else:
            reason = why_not_served(config, served_id) if allowed else None
            error = unknown_model(served_id, policy.visible(caller, config.served_models), reason=reason)
            await error_response(error, redact=service.secrets.redact)(scope, receive, send)

    deep_health = DeepHealth(config, service.upstream)
    metrics = metrics_endpoint(service.telemetry)
    metrics_path = f"{'' if service.standalone else prefix}{config.telemetry.metrics_path}"

    async def health(request: Request) -> Response:
        if request.query_params.get("deep", "") in ("", "0", "false"):
            return Response(_HEALTH, media_type=JSON)
        # `/health` is public under inbound auth; the deep check calls upstreams, so it needs the key.
        refused = auth.check(request.scope)
        if refused is not None:
            return error_response(refused)
        return Response(encode(await deep_health.report()), media_type=JSON)

    return [
        Route(f"{prefix}/models", models, methods=["GET"]),
        Route(f"{prefix}/models/{{model:path}}", ASGIEndpoint(model), methods=["GET"]),
        Route(f"{prefix}/health", health, methods=["GET"]),
        *count_tokens_routes(service, prefix, passthrough),
        *runs_routes(service, prefix, auth),
        *keys_routes(service, prefix),
        *lessons_routes(service, prefix),
        *shadows_routes(service, prefix, auth),
        *([Route(metrics_path, ASGIEndpoint(metrics), methods=["GET"])] if metrics is not None else []),
    ]
