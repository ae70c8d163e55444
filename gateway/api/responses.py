"""`POST /v1/responses`: OpenAI's Responses API, answered on the chat path (serving/openai/responses.py reads the
request into a chat request and writes the answer back)."""

import json

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError

from gateway.api import generation
from gateway.api.prepare import prepare_chat
from gateway.policy.schema import Policy
from gateway.state import GatewayState
from serving.openai.errors import BadRequest, GatewayError, refusal
from serving.openai.responses import ResponseEvents, ResponsesRequest, response_object, responses_words
from serving.openai.schemas import ChatCompletionRequest

FORWARDED_HEADERS = ("x-tandem-route", "x-tandem-backend")


async def serve(body: ResponsesRequest, request: Request, state: GatewayState, policy: Policy):
    if refused := body.refused_field():
        raise BadRequest(refused[1], param=refused[0])
    chat_body, origins = body.chat_request()
    try:
        try:
            chat = ChatCompletionRequest.model_validate(chat_body)
        except ValidationError as exc:
            raise refusal(exc.errors(include_url=False)) from None
        answer = await generation.serve(chat, request, state, policy, prepare_chat, chat=True)
    except GatewayError as exc:
        exc.message = responses_words(exc.message, origins)
        exc.param = responses_words(exc.param, origins)
        raise
    headers = {
        name: value
        for name, value in answer.headers.items()
        if name in FORWARDED_HEADERS or name.startswith("x-ratelimit-")
    }
    if isinstance(answer, StreamingResponse):
        chat_events = answer.body_iterator

        async def events():
            try:
                async for event in ResponseEvents(body).translate(chat_events):
                    yield event
            finally:  # closed when the response ends (ClosingStreamingResponse): the chat stream's answer with it
                await chat_events.aclose()

        return generation.ClosingStreamingResponse(events(), media_type="text/event-stream", headers=headers)
    if answer.status_code != 200:  # the client left (499)
        return answer
    return JSONResponse(response_object(body, json.loads(answer.body)), headers=headers)
