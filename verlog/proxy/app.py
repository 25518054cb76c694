"""The proxy's core and its FastAPI app.

``POST /rollout/{rollout_id}/attempt/{attempt}/v1/chat/completions`` renders the request's messages
(+ tools) with the tokenizer's chat template (:class:`verlog.chat.renderer.ChatRenderer`), generates
through the :class:`~verlog.proxy.worker.GenerationWorker`, parses ``<think>`` and Hermes tool calls
(:func:`verlog.chat.parsing.parse_reply`) into an OpenAI response and records the call. The reply is
decoded for the agent only: the recorded response ids are the engine's, never re-tokenised.
``POST /rollout/{rollout_id}/attempt/{attempt}/reward`` stores ``{"reward": float}``.

Overload and abandonment: a request whose client disconnects is cancelled (its generation is dropped
by the worker, at the next chunk boundary when generation is chunked); at most ``max_pending``
requests are served or queued at once, and one more gets HTTP 503 with a one-line error at once
instead of waiting behind them.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from verlog.chat.parsing import parse_reply, reasoning_text
from verlog.chat.renderer import ChatRenderer
from verlog.proxy.gate import PauseGate
from verlog.proxy.openai_format import (ProxyRequestError, completion_response, error_body, parse_body,
                                       parse_chat_request)
from verlog.proxy.recorder import CallRecord, ProxyRecorder
from verlog.proxy.worker import GenerationWorker

__all__ = ["OpenAIProxy", "create_app"]

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
        self.worker = GenerationWorker(engine, max_batch, chunk_tokens)
        self.gate = PauseGate()
        self._chat = ChatRenderer(tokenizer, None, chat_template)

    def pause(self):
        """Async context manager: new requests wait, in-flight ones drain, then the body runs (e.g.
        ``engine.load_weights``); requests resume on exit. Use in the serving event loop."""
        return self.gate.paused()

    async def chat_completion(self, rollout_id: str, attempt: str, body: Any) -> dict[str, Any]:
        """Serve and record one request.

        Raises:
            ProxyRequestError: a bad request, a template that cannot render it, or an engine
                ValueError (e.g. a prompt too long), all one-line (HTTP 400); ``max_pending``
                requests already admitted (HTTP 503).
            Exception: another engine failure.
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
        finally:
            self.admitted -= 1

    async def serve_unless_disconnected(self, rollout_id: str, attempt: str, body: Any,
                                        disconnected: Awaitable[None]) -> dict[str, Any] | None:
        """:meth:`chat_completion`, cancelled (its generation dropped) if the awaitable ``disconnected``
        finishes first: returns None then. Runs in the caller's task (the reply is sent in the same
        step as the request leaves the pause gate), which the watcher cancels.

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
            reply = await self.chat_completion(rollout_id, attempt, body)
            state["finished"] = True
            return reply
        except asyncio.CancelledError:
            if not state["gone"] or task.uncancel() > 0:  # cancelled from outside as well
                raise
            self.abandoned += 1
            return None
        finally:
            state["finished"] = True
            watch.remove_done_callback(client_left)
            watch.cancel()

    async def _serve(self, rollout_id: str, attempt: str, request: Any, arrived: float) -> dict[str, Any]:
        """Render, generate (after any pause), parse and record one validated request."""
        chat = ChatRenderer(self._chat.tokenizer, request.tools, self._chat.chat_template)
        try:
            prompt = chat.prompt_ids(request.messages)
        except Exception as exc:  # jinja errors: the request's shape does not fit the template
            raise ProxyRequestError(f"cannot render the messages with the chat template: {exc}", "messages") from None
        await self.gate.enter()
        try:
            seq = self.recorder.reserve(rollout_id, attempt)
            started = time.time()
            try:
                gen = await self.worker.generate(prompt, request.params)
            except ValueError as exc:
                raise ProxyRequestError(f"the engine rejected the request: {exc}") from None
            finished = time.time()
            text = chat.decode(list(gen.token_ids))
            ended = gen.token_ids[-1] == chat.eos_id
            if ended and text.endswith(chat.eos):
                text = text[: -len(chat.eos)]
            parsed = parse_reply(text)
            response = completion_response(parsed, reasoning_text(text), gen.finish_reason, len(prompt),
                                           len(gen.token_ids), request.model or self.model_name)
            self.recorder.add_call(rollout_id, attempt, CallRecord(
                seq=seq, prompt_ids=list(prompt), response_ids=list(gen.token_ids), logprobs=list(gen.logprobs),
                finish_reason=gen.finish_reason, messages=request.messages, tools=request.tools,
                reply=response["choices"][0]["message"], malformed_calls=sum(c.error is not None for c in parsed.calls),
                arrived=arrived, started=started, finished=finished))
            return response
        finally:
            self.gate.leave()


async def _disconnect(request: Request) -> None:
    """Returns once the client has closed the connection (the ASGI server's ``http.disconnect``; the
    body has been read, so no other message is due)."""
    while (await request.receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.05)  # an unexpected message: do not spin


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
        body = await json_body(request)
        try:
            reply = await proxy.serve_unless_disconnected(rollout_id, attempt, body, _disconnect(request))
        except ProxyRequestError:
            raise
        except Exception as exc:  # noqa: BLE001 - an engine failure, reported to the agent
            return JSONResponse(error_body(f"generation failed: {type(exc).__name__}: {exc}", kind="server_error"),
                                status_code=500)
        if reply is None:  # the client is gone; nobody reads this (499: nginx's "client closed request")
            return Response(status_code=499)
        return JSONResponse(reply)

    @app.post("/rollout/{rollout_id}/attempt/{attempt}/reward")
    async def reward(rollout_id: str, attempt: str, request: Request) -> dict[str, Any]:
        body = await json_body(request)
        value = body.get("reward") if isinstance(body, dict) else None
        try:
            proxy.recorder.set_reward(rollout_id, attempt, value)  # type: ignore[arg-type]
        except ValueError as exc:
            raise ProxyRequestError(str(exc), "reward") from None
        return {"rollout_id": rollout_id, "attempt": attempt, "reward": float(value)}  # type: ignore[arg-type]

    return app
