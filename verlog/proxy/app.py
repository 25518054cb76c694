"""The proxy's core and its FastAPI app.

``POST /rollout/{rollout_id}/attempt/{attempt}/v1/chat/completions`` renders the request's messages
(+ tools) with the tokenizer's chat template (:class:`verlog.chat.renderer.ChatRenderer`), generates
through the :class:`~verlog.proxy.worker.GenerationWorker`, parses ``<think>`` and Hermes tool calls
(:func:`verlog.chat.parsing.parse_reply`) into an OpenAI response and records the call. The reply is
decoded for the agent only: the recorded response ids are the engine's, never re-tokenised.
``POST /rollout/{rollout_id}/attempt/{attempt}/reward`` stores ``{"reward": float}``.

A chat template that drops assistant ``tool_calls`` (SmolLM2's renders only ``content``) gets the calls
written into the content as the Hermes ``<tool_call>`` blocks the model generates
(:meth:`verlog.chat.renderer.ChatRenderer.tool_calls_as_text`); the proxy says so once with a warning on the
``verlog.proxy`` logger, counts such requests in ``OpenAIProxy.tool_calls_as_text`` and marks their
records (``CallRecord.tool_calls_as_text``).

A request with ``"stream": true`` gets the same reply as server-sent ``chat.completion.chunk`` events
(:mod:`verlog.proxy.streaming`), generated in full first and recorded once every chunk is sent.

Clients that keep one base URL for every episode use ``/v1/chat/completions`` with an
``X-Session-ID`` header: the calls of one session id are recorded as rollout ``<session id>``,
attempt ``0``, and ``POST /reward`` with the same header stores its reward.

Overload and abandonment: a request whose client disconnects is cancelled (its generation is dropped
by the worker, at the next chunk boundary when generation is chunked; a stream left before its end
is not recorded); at most ``max_pending``
requests are served or queued at once, and one more gets HTTP 503 with a one-line error at once
instead of waiting behind them.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from verlog.chat.parsing import parse_reply, reasoning_text
from verlog.chat.renderer import ChatRenderer
from verlog.proxy.gate import PauseGate
from verlog.proxy.openai_format import (ChatRequest, ProxyRequestError, completion_response, error_body, parse_body,
                                       parse_chat_request)
from verlog.proxy.recorder import CallRecord, ProxyRecorder
from verlog.proxy.streaming import DONE_EVENT, completion_chunks, sse_event
from verlog.proxy.worker import GenerationWorker

__all__ = ["MAX_SESSION_CHARS", "SESSION_HEADER", "OpenAIProxy", "Turn", "TurnStream", "create_app", "session_id"]

log = logging.getLogger("verlog.proxy")


class OpenAIProxy:
    """Serves chat completions from a rollout engine and records every call.

    Args:
        engine: ``generate(prompts, SamplingParams) -> list[Generation]`` (sync or async).
        tokenizer: the Hugging Face tokenizer whose chat template renders requests.
        recorder: where calls and rewards go (a new :class:`ProxyRecorder` when None).
        model_name: the ``model`` of responses when the request names none.
        default_max_tokens: ``max_tokens`` of requests that give none.
        max_batch: most prompts per engine call.
        chat_template: a template overriding the tokenizer's own.
        chunk_tokens: most tokens generated per request per engine call (None: all at once), so a
            request whose client left stops costing generation within one chunk
            (:class:`~verlog.proxy.worker.GenerationWorker`).
        max_pending: most requests admitted at once (waiting at a pause, queued or generating); the
            next one is refused with HTTP 503.

    Attributes:
        refused: requests refused because ``max_pending`` were admitted.
        abandoned: requests cancelled because their client disconnected.
        tool_calls_as_text: requests rendered with their assistant ``tool_calls`` written into the
            content, because the chat template drops them (the first one is also logged as a warning).

    Raises:
        ValueError: the tokenizer has no eos token, ``max_batch``, ``chunk_tokens`` or ``max_pending`` < 1.
    """

    def __init__(self, engine: Any, tokenizer: Any, recorder: ProxyRecorder | None = None, *,
                 model_name: str = "verlog", default_max_tokens: int = 256, max_batch: int = 64,
                 chat_template: str | None = None, chunk_tokens: int | None = 64, max_pending: int = 1024) -> None:
        if max_pending < 1:
            raise ValueError(f"OpenAIProxy: max_pending must be >= 1, got {max_pending}")
        self.engine = engine
        self.recorder = recorder if recorder is not None else ProxyRecorder()
        self.model_name = model_name
        self.default_max_tokens = default_max_tokens
        self.max_pending = max_pending
        self.admitted = 0
        self.refused = 0
        self.abandoned = 0
        self.tool_calls_as_text = 0
        self.worker = GenerationWorker(engine, max_batch, chunk_tokens)
        self.gate = PauseGate()
        self._chat = ChatRenderer(tokenizer, None, chat_template)

    def pause(self):
        """Async context manager: new requests wait, in-flight ones drain, then the body runs (e.g.
        ``engine.load_weights``); requests resume on exit. Use in the serving event loop."""
        return self.gate.paused()

    async def chat_completion(self, rollout_id: str, attempt: str, body: Any) -> dict[str, Any]:
        """Serve and record one request; returns the chat-completion object.

        Raises:
            ProxyRequestError: a bad request, a template that cannot render it, or an engine
                ValueError (e.g. a prompt too long), all one-line (HTTP 400); ``max_pending``
                requests already admitted (HTTP 503).
            Exception: another engine failure.
        """
        turn = await self.generate_turn(rollout_id, attempt, body)
        self.finish_turn(turn, delivered=True)
        return turn.response

    async def generate_turn(self, rollout_id: str, attempt: str, body: Any) -> "Turn":
        """Admit, render and generate one request, without recording it: the caller must end it with
        :meth:`finish_turn` (which records it, or counts it abandoned, and frees its slot). On an
        exception (cancellation included) the slot is freed here and nothing is recorded.

        Raises:
            what :meth:`chat_completion` raises.
        """
        arrived = time.time()
        request = parse_chat_request(body, self.default_max_tokens)
        if self.admitted >= self.max_pending:
            self.refused += 1
            raise ProxyRequestError(f"the proxy is overloaded: {self.admitted} requests pending (max_pending "
                                    f"{self.max_pending}); retry later", status=503, kind="server_error")
        self.admitted += 1
        try:
            return await self._serve(rollout_id, attempt, request, arrived)
        except BaseException:
            self.admitted -= 1
            raise

    def finish_turn(self, turn: "Turn", delivered: bool) -> None:
        """End a turn of :meth:`generate_turn` once: free its slot, and record it when its reply was
        ``delivered`` or else count it in ``abandoned``. Later calls do nothing."""
        if turn.ended:
            return
        turn.ended = True
        self.admitted -= 1
        if delivered:
            self.recorder.add_call(turn.rollout_id, turn.attempt, turn.record)
        else:
            self.abandoned += 1

    async def serve_unless_disconnected(self, rollout_id: str, attempt: str, body: Any,
                                        disconnected: Awaitable[None]) -> "Turn | None":
        """:meth:`generate_turn`, cancelled (its generation dropped, counted in ``abandoned``) if the
        awaitable ``disconnected`` finishes first: returns None then. Runs in the caller's task (the
        reply is sent in the same step as the request leaves the pause gate), which the watcher cancels.

        Raises:
            what :meth:`chat_completion` raises.
        """
        task = asyncio.current_task()
        assert task is not None
        state = {"gone": False, "finished": False}

        def client_left(watch: asyncio.Future[None]) -> None:
            if not watch.cancelled() and not state["finished"]:
                state["gone"] = True
                task.cancel()

        watch = asyncio.ensure_future(disconnected)
        watch.add_done_callback(client_left)
        try:
            turn = await self.generate_turn(rollout_id, attempt, body)
            state["finished"] = True
            return turn
        except asyncio.CancelledError:
            if not state["gone"] or task.uncancel() > 0:  # cancelled from outside as well
                raise
            self.abandoned += 1
            return None
        finally:
            state["finished"] = True
            watch.remove_done_callback(client_left)
            watch.cancel()

    async def _serve(self, rollout_id: str, attempt: str, request: ChatRequest, arrived: float) -> "Turn":
        """Render, generate (after any pause) and parse one validated request into an unrecorded turn."""
        chat = self._chat.with_tools(request.tools)
        try:
            prompt = chat.prompt_ids(request.messages)
        except Exception as exc:  # jinja errors: the request's shape does not fit the template
            raise ProxyRequestError(f"cannot render the messages with the chat template: {exc}", "messages") from None
        calls_as_text = chat.rewrites_calls(request.messages)
        if calls_as_text:
            if not self.tool_calls_as_text:
                log.warning("the chat template does not render assistant tool_calls: the proxy writes them into the "
                            "message content as Hermes <tool_call> blocks (counted in OpenAIProxy.tool_calls_as_text)")
            self.tool_calls_as_text += 1
        await self.gate.enter()
        try:
            seq = self.recorder.reserve(rollout_id, attempt)
            started = time.time()
            try:
                gen = await self.worker.generate(prompt, request.params)
            except ValueError as exc:
                raise ProxyRequestError(f"the engine rejected the request: {exc}") from None
            finished = time.time()
        finally:
            self.gate.leave()
        text = chat.decode(list(gen.token_ids))
        ended = gen.token_ids[-1] == chat.eos_id
        if ended and text.endswith(chat.eos):
            text = text[: -len(chat.eos)]
        parsed = parse_reply(text)
        response = completion_response(parsed, reasoning_text(text), gen.finish_reason, len(prompt),
                                       len(gen.token_ids), request.model or self.model_name)
        record = CallRecord(
            seq=seq, prompt_ids=list(prompt), response_ids=list(gen.token_ids), logprobs=list(gen.logprobs),
            finish_reason=gen.finish_reason, messages=request.messages, tools=request.tools,
            reply=response["choices"][0]["message"], malformed_calls=sum(c.error is not None for c in parsed.calls),
            arrived=arrived, started=started, finished=finished, tool_calls_as_text=calls_as_text)
        return Turn(rollout_id, attempt, request, response, record)


@dataclass
class Turn:
    """A generated, not yet recorded, reply (:meth:`OpenAIProxy.generate_turn`).

    Attributes:
        rollout_id, attempt: where it is recorded.
        request: the validated request.
        response: the chat-completion object sent back.
        record: what is recorded once the reply is delivered.
        ended: :meth:`OpenAIProxy.finish_turn` was called.
    """

    rollout_id: str
    attempt: str
    request: ChatRequest
    response: dict[str, Any]
    record: CallRecord
    ended: bool = False


class TurnStream(StreamingResponse):
    """A turn sent as server-sent events (:mod:`verlog.proxy.streaming`). It is recorded once every
    chunk has been sent and before ``[DONE]``, so a client that has read the whole stream always finds
    its turn recorded; a client that leaves earlier (Starlette cancels the stream) leaves nothing
    recorded and is counted in ``abandoned``. The turn's slot is freed either way."""

    def __init__(self, proxy: OpenAIProxy, turn: Turn) -> None:
        self.proxy, self.turn = proxy, turn
        super().__init__(self._events(), media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def _events(self) -> AsyncIterator[bytes]:
        """The events of the turn; records it after the last chunk."""
        for chunk in completion_chunks(self.turn.response, self.turn.request.include_usage):
            yield sse_event(chunk)
        self.proxy.finish_turn(self.turn, delivered=True)
        yield DONE_EVENT

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.proxy.finish_turn(self.turn, delivered=False)  # nothing when the stream was delivered


async def _disconnect(request: Request) -> None:
    """Returns once the client has closed the connection (the ASGI server's ``http.disconnect``; the
    body has been read, so no other message is due)."""
    while (await request.receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.05)  # an unexpected message: do not spin


SESSION_HEADER = "X-Session-ID"
"""The header that names an episode on the shared base URL ``/v1``."""

SESSION_ATTEMPT = "0"
"""The attempt under which a session's calls are recorded (its rollout id is the session id)."""

MAX_SESSION_CHARS = 128
"""Longest session id accepted."""

_SESSION_ID = re.compile(r"[A-Za-z0-9._:-]+")


def session_id(request: Request) -> str:
    """The episode a request on the shared base URL belongs to: its one ``X-Session-ID`` header.

    Raises:
        ProxyRequestError: no such header, several, longer than ``MAX_SESSION_CHARS`` or holding other
            characters than letters, digits and ``. _ : -`` (HTTP 400, one line).
    """
    values = request.headers.getlist(SESSION_HEADER)
    if not values:
        raise ProxyRequestError(f"requests to /v1 need an {SESSION_HEADER} header naming their episode (or use "
                                f"the base URL /rollout/<id>/attempt/<n>/v1)", SESSION_HEADER)
    if len(values) > 1:
        raise ProxyRequestError(f"{SESSION_HEADER} was given {len(values)} times; give it once", SESSION_HEADER)
    value = values[0]
    if len(value) > MAX_SESSION_CHARS:
        raise ProxyRequestError(f"{SESSION_HEADER} has {len(value)} characters; at most {MAX_SESSION_CHARS} are "
                                f"accepted", SESSION_HEADER)
    if not _SESSION_ID.fullmatch(value):
        raise ProxyRequestError(f"{SESSION_HEADER} may hold only letters, digits and . _ : - (got {value[:40]!r})",
                                SESSION_HEADER)
    return value


def create_app(proxy: OpenAIProxy) -> FastAPI:
    """The FastAPI app serving ``proxy`` (``app.state.proxy``)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await proxy.worker.close()

    app = FastAPI(title="verlog OpenAI proxy", lifespan=lifespan)
    app.state.proxy = proxy

    async def json_body(request: Request) -> Any:
        return parse_body(await request.body())

    @app.exception_handler(ProxyRequestError)
    async def bad_request(request: Request, exc: ProxyRequestError) -> JSONResponse:
        return JSONResponse(error_body(str(exc), exc.param, exc.kind), status_code=exc.status)

    @app.post("/rollout/{rollout_id}/attempt/{attempt}/v1/chat/completions")
    async def chat_completions(rollout_id: str, attempt: str, request: Request) -> Response:
        return await serve(rollout_id, attempt, request)

    @app.post("/v1/chat/completions")
    async def session_chat_completions(request: Request) -> Response:
        return await serve(session_id(request), SESSION_ATTEMPT, request)

    async def serve(rollout_id: str, attempt: str, request: Request) -> Response:
        """One chat-completions request of (rollout, attempt): JSON, or events when it streams."""
        body = await json_body(request)
        try:
            turn = await proxy.serve_unless_disconnected(rollout_id, attempt, body, _disconnect(request))
        except ProxyRequestError:
            raise
        except Exception as exc:  # noqa: BLE001 - an engine failure, reported to the agent
            return JSONResponse(error_body(f"generation failed: {type(exc).__name__}: {exc}", kind="server_error"),
                                status_code=500)
        if turn is None:  # the client is gone; nobody reads this (499: nginx's "client closed request")
            return Response(status_code=499)
        if turn.request.stream:
            return TurnStream(proxy, turn)
        proxy.finish_turn(turn, delivered=True)
        return JSONResponse(turn.response)

    @app.post("/rollout/{rollout_id}/attempt/{attempt}/reward")
    async def reward(rollout_id: str, attempt: str, request: Request) -> dict[str, Any]:
        return await store_reward(rollout_id, attempt, request)

    @app.post("/reward")
    async def session_reward(request: Request) -> dict[str, Any]:
        return await store_reward(session_id(request), SESSION_ATTEMPT, request)

    async def store_reward(rollout_id: str, attempt: str, request: Request) -> dict[str, Any]:
        """Store the ``{"reward": float}`` body as the reward of (rollout, attempt)."""
        body = await json_body(request)
        value = body.get("reward") if isinstance(body, dict) else None
        try:
            proxy.recorder.set_reward(rollout_id, attempt, value)  # type: ignore[arg-type]
        except ValueError as exc:
            raise ProxyRequestError(str(exc), "reward") from None
        return {"rollout_id": rollout_id, "attempt": attempt, "reward": float(value)}  # type: ignore[arg-type]

    return app
