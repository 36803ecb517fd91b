"""The synthetic server's endpoints besides generation: the model list, health,
/tokenize, /metrics, the ground-truth records and the drill control.

Apart from ``generation.py``: none of these is planned, paced or recorded; they answer
at once from the app's state.
"""

from __future__ import annotations

import dataclasses

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from moeperf.targets.openai_wire import ApiError, BadRequest, models_list
from moeperf.targets.synthetic.drill import DrillRequestError, parse_window
from moeperf.targets.synthetic.http_edge import error_response, read_body, refusal
from moeperf.targets.synthetic.openai_request import MAX_MODEL_LEN, parse_json_object, prompt_text
from moeperf.targets.synthetic.state import STATE
from moeperf.targets.synthetic.tokenizer import encode, token_strs


async def models(request: web.Request) -> web.Response:
    model = request.app[STATE].config.model
    return web.json_response(models_list(model, MAX_MODEL_LEN))


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def tokenize(request: web.Request) -> web.Response:
    """vLLM's /tokenize: ``{"prompt": str}`` or ``{"messages": [...]}``."""
    try:
        body = parse_json_object(await read_body(request))
        if "messages" in body:
            text = prompt_text(body, chat=True)
        elif "prompt" in body:
            text = prompt_text(body, chat=False)
        else:
            raise BadRequest("give 'prompt' or 'messages'", "prompt")
    except ApiError as exc:
        return refusal(exc)
    tokens = encode(text)
    result: dict[str, object] = {
        "count": len(tokens),
        "max_model_len": MAX_MODEL_LEN,
        "tokens": tokens,
    }
    if body.get("return_token_strs"):
        result["token_strs"] = token_strs(text)
    return web.json_response(result)


async def metrics(request: web.Request) -> web.Response:
    registry = request.app[STATE].metrics.registry
    headers = {"Content-Type": CONTENT_TYPE_LATEST}
    return web.Response(body=generate_latest(registry), headers=headers)


async def ground_truth_one(request: web.Request) -> web.Response:
    response_id = request.match_info["id"]
    record = request.app[STATE].store.get(response_id)
    if record is None:
        return error_response(404, f"no ground truth kept for id {response_id!r}", kind="not_found")
    return web.json_response(record.to_json())


async def ground_truth_query(request: web.Request) -> web.Response:
    """``{"ids": [...]}`` -> ``{"records": {id: record}, "missing": [ids]}``."""
    try:
        body = parse_json_object(await read_body(request))
        ids = body.get("ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise BadRequest("'ids' must be a list of strings", "ids")
    except ApiError as exc:
        return refusal(exc)
    return web.json_response(request.app[STATE].store.query(ids))


async def drill_fault(request: web.Request) -> web.Response:
    state = request.app[STATE]
    try:
        window = parse_window(parse_json_object(await request.read()), state.clock_ns())
    except DrillRequestError as exc:
        return refusal(BadRequest(str(exc), "drill"))
    except ApiError as exc:
        return refusal(exc)
    state.drill.open(window)
    return web.json_response({"kind": window.kind, "until_ns": window.until_ns})


async def drill_window(request: web.Request) -> web.Response:
    return web.json_response(dataclasses.asdict(request.app[STATE].drill.last()))
