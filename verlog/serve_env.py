"""Serve a Verlog text environment as an OpenEnv server (``verlog-serve-env``).

The wire format is OpenEnv's (see :mod:`verlog.envs.openenv_client`): each WebSocket connection to
``/ws`` is one session with an environment of its own, built by the registry with the server's
arguments, and plays ``reset``/``step``/``state``/``close`` JSON frames; ``GET /health``, ``/schema``
and ``/metadata`` describe the server, and ``GET /verlog/info`` tells a Verlog client the task and its
step limit. A step's action is ``{"message": <the model's raw reply>}``; the observation carries the
text-env contract in full (:func:`~verlog.envs.openenv_client.observation_payload`), so OpenEnv's own
clients see ``done`` and Verlog's client sees ``terminated`` and ``truncated`` apart.

Not served: OpenEnv's stateless ``POST /reset`` and ``POST /step`` (each builds a fresh environment,
so no episode can go past one step over them), its MCP tool endpoints and its web interface.

What a client sends is data only: JSON text frames parsed with :func:`json.loads`, checked field by
field; nothing is unpickled, imported or executed on its behalf. Frames above ``max_message_bytes`` close
the connection (the WebSocket layer refuses them), a reply above ``max_reply_chars`` is refused, and at
most ``max_sessions`` sessions run at once. Environment calls run on one worker thread, one at a time,
off the event loop. The server has no authentication: it binds loopback addresses only, unless the
caller asks for another address explicitly (:func:`check_host`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI, WebSocket, WebSocketDisconnect

from verlog.catalog import OPENENV_PREFIX

from verlog.envs.base import REPLY_MAX_CHARS, TextEnv
from verlog.envs.openenv_client import ACTION_FIELD, INFO_PATH, WS_PATH, observation_payload
from verlog.envs.registry import make_env

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "ServedEnv", "build_app", "build_server", "check_host", "is_loopback", "listen", "serve"]

#: the largest WebSocket frame a client may send (bytes): room for a reply of REPLY_MAX_CHARS characters
#: written as JSON \\u escapes
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20


def is_loopback(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback IP address (``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_host(host: str, allow_remote: bool) -> None:
    """Refuse a non-loopback ``host`` unless ``allow_remote``: the server has no authentication, and
    any client that reaches it can run episodes.

    Raises:
        ValueError: one line saying so.
    """
    if not allow_remote and not is_loopback(host):
        raise ValueError(f"{host} is not a loopback address, and the server has no authentication: anyone who can "
                         f"reach it can use it; pass --allow-remote to bind it anyway")


class ServedEnv:
    """What the server serves: a registered task with fixed arguments, and the limits on clients.

    Args:
        task: a registered environment name (not an ``openenv:`` one).
        env_kwargs: keyword arguments of :func:`~verlog.envs.registry.make_env` for every session.
        max_sessions: sessions at once (>= 1); a client beyond it gets a ``CAPACITY_REACHED`` error frame.
        max_message_bytes: the largest frame a client may send (bytes, >= 1024).
        max_reply_chars: the longest reply accepted in a step (characters).
        idle_timeout_s: a session that sends nothing for this long is closed (seconds, > 0).

    Raises:
        ValueError / TypeError: the task cannot be built with ``env_kwargs`` (one env is built and
            closed to check it), or a bad limit.
    """

    def __init__(self, task: str, env_kwargs: dict[str, Any] | None = None, *, max_sessions: int = 128,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, max_reply_chars: int = REPLY_MAX_CHARS,
                 idle_timeout_s: float = 3600.0) -> None:
        if task.startswith(OPENENV_PREFIX):
            raise ValueError(f"{task} is itself an OpenEnv client; serve the environment where it runs")
        for name, value, low in (("max_sessions", max_sessions, 1), ("max_message_bytes", max_message_bytes, 1024),
                                 ("max_reply_chars", max_reply_chars, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if isinstance(idle_timeout_s, bool) or not isinstance(idle_timeout_s, (int, float)) or not idle_timeout_s > 0:
            raise ValueError(f"idle_timeout_s must be a positive number of seconds, got {idle_timeout_s!r}")
        self.task, self.env_kwargs = task, dict(env_kwargs or {})
        self.max_sessions, self.max_message_bytes = max_sessions, max_message_bytes
        self.max_reply_chars, self.idle_timeout_s = max_reply_chars, float(idle_timeout_s)
        probe = self.make()
        try:
            self.max_steps: int | None = probe.unwrapped.max_steps
            self.format_penalty: float = probe.unwrapped.format_penalty
        finally:
            probe.close()

    def make(self) -> TextEnv:
        """A new environment of the served task."""
        return make_env(self.task, **self.env_kwargs)

    def info(self) -> dict[str, Any]:
        """The body of ``GET /verlog/info``."""
        from verlog import __version__

        return {"task": self.task, "max_steps": self.max_steps, "format_penalty": self.format_penalty,
                "action_field": ACTION_FIELD, "max_message_bytes": self.max_message_bytes,
                "max_reply_chars": self.max_reply_chars, "verlog_version": __version__}


def _error(code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "data": {"message": " ".join(message.split())[:500], "code": code}}


class _Session:
    """One client's environment and episode bookkeeping; :meth:`handle` answers one frame."""

    def __init__(self, served: ServedEnv, run: Callable[..., Any]) -> None:
        self.served, self.run = served, run
        self.env: TextEnv | None = None
        self.episode_id: str | None = None
        self.step_count = 0

    async def handle(self, raw: str) -> dict[str, Any] | None:
        """The answer to one text frame, or ``None`` for ``close``."""
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            return _error("INVALID_JSON", f"Invalid JSON: {exc}")
        if not isinstance(message, dict):
            return _error("VALIDATION_ERROR", f"a message is a JSON object, got {type(message).__name__}")
        kind, data = message.get("type"), message.get("data", {})
        if not isinstance(data, dict):
            return _error("VALIDATION_ERROR", f"data must be an object, got {type(data).__name__}")
        if kind == "close":
            return None
        if kind == "state":
            return {"type": "state", "data": {"episode_id": self.episode_id, "step_count": self.step_count,
                                              "task": self.served.task}}
        if kind == "reset":
            return await self._reset(data)
        if kind == "step":
            return await self._step(data)
        return _error("UNKNOWN_TYPE", f"Unknown message type: {str(kind)[:40]}")

    async def _reset(self, data: dict[str, Any]) -> dict[str, Any]:
        seed = data.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
            return _error("VALIDATION_ERROR", f"seed must be an int in [0, 2**63) or null, got {str(seed)[:40]}")
        episode_id = data.get("episode_id")
        if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > 255):
            return _error("VALIDATION_ERROR", "episode_id must be a string of at most 255 characters")
        try:
            if self.env is None:
                self.env = await self.run(self.served.make)
            obs, info = await self.run(lambda: self.env.reset(seed=seed))
        except Exception as exc:  # noqa: BLE001 - the env may raise anything; the client gets one line
            return _error("EXECUTION_ERROR", f"reset failed: {type(exc).__name__}: {exc}")
        self.episode_id, self.step_count = episode_id or uuid.uuid4().hex, 0
        return {"type": "observation", "data": observation_payload(self.env, obs, None, False, False, info)}

    async def _step(self, data: dict[str, Any]) -> dict[str, Any]:
        extra = sorted(set(data) - {ACTION_FIELD, "metadata"})
        if extra:
            return _error("VALIDATION_ERROR", f"the action has the field {ACTION_FIELD!r} (and metadata) only; "
                                              f"got {', '.join(k[:40] for k in extra[:5])}")
        reply = data.get(ACTION_FIELD)
        if not isinstance(reply, str):
            return _error("VALIDATION_ERROR", f"action field {ACTION_FIELD!r} must be a string")
        if len(reply) > self.served.max_reply_chars:
            return _error("VALIDATION_ERROR", f"a reply of {len(reply)} characters is over the limit of "
                                              f"{self.served.max_reply_chars}")
        if self.env is None:
            return _error("EXECUTION_ERROR", "step before reset: send a reset first")
        try:
            obs, reward, terminated, truncated, info = await self.run(lambda: self.env.step(reply))
        except Exception as exc:  # noqa: BLE001
            return _error("EXECUTION_ERROR", f"step failed: {type(exc).__name__}: {exc}")
        self.step_count += 1
        return {"type": "observation",
                "data": observation_payload(self.env, obs, reward, terminated, truncated, info)}

    def close(self) -> None:
        if self.env is not None:
            env, self.env = self.env, None
            try:
                env.close()
            except Exception:  # noqa: BLE001 - a broken env may fail to close
                pass


def _schemas() -> dict[str, Any]:
    """The JSON schemas of ``GET /schema``: action, observation and state."""
    string, number, boolean = {"type": "string"}, {"type": "number"}, {"type": "boolean"}
    action = {"title": "VerlogAction", "type": "object", "additionalProperties": False, "required": [ACTION_FIELD],
              "properties": {ACTION_FIELD: {**string, "description": "the model's raw reply; the served env "
                                                                     "parses the action out of it"},
                             "metadata": {"type": "object"}}}
    observation = {
        "title": "VerlogObservation", "type": "object",
        "properties": {
            "text": {**string, "description": "the observation"},
            "terminated": {**boolean, "description": "the game reached an end state of its own"},
            "truncated": {**boolean, "description": "the episode was cut from outside the game (step limit)"},
            "instruction": {**string, "description": "the system prompt of this episode"},
            "valid_actions": {"type": "array", "items": string}, "progression": number, "success": boolean,
            "episode_step": {"type": "integer"}, "action": {**string, "description": "the action executed"},
            "action_valid": {**boolean, "description": "whether the reply held a valid action"},
            "game_reward": {**number, "description": "the reward before the format penalty"},
            "context": string, "state_key": {"type": ["string", "null"], "description": "the exact state, hex"},
            "info": {"type": "object"}, "metadata": {"type": "object"},
            "done": boolean, "reward": {"type": ["number", "null"]},
        },
    }
    state = {"title": "VerlogState", "type": "object",
             "properties": {"episode_id": {"type": ["string", "null"]}, "step_count": {"type": "integer"},
                            "task": string}}
    return {"action": action, "observation": observation, "state": state}


def build_app(served: ServedEnv) -> FastAPI:
    """The FastAPI application of the server (no docs pages, no POST routes).

    Returns:
        A ``fastapi.FastAPI`` app; :func:`serve` runs it.
    """
    from verlog import __version__

    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verlog-env")

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        yield
        executor.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title=f"verlog-serve-env {served.task}", docs_url=None, redoc_url=None, openapi_url=None,
                  lifespan=lifespan)
    active = {"sessions": 0}

    async def run(fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(executor, fn)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "healthy"}

    @app.get("/metadata")
    def metadata() -> dict[str, Any]:
        return {"name": served.task, "description": f"Verlog text environment {served.task}: the action is the "
                f"model's raw reply in '{ACTION_FIELD}', the observation's 'text' is what the model reads next",
                "version": __version__, "readme_content": None, "author": None, "documentation_url": None}

    @app.get("/schema")
    def schema() -> dict[str, Any]:
        return _schemas()

    @app.get(INFO_PATH)
    def info() -> dict[str, Any]:
        return served.info()

    @app.websocket(WS_PATH)
    async def session(websocket: WebSocket) -> None:
        await websocket.accept()
        if active["sessions"] >= served.max_sessions:
            await websocket.send_text(json.dumps(_error(
                "CAPACITY_REACHED", f"the server runs {served.max_sessions} sessions at most (--max-sessions)")))
            await websocket.close(code=1013)
            return
        active["sessions"] += 1
        state = _Session(served, run)
        try:
            while True:
                try:
                    message = await asyncio.wait_for(websocket.receive(), timeout=served.idle_timeout_s)
                except asyncio.TimeoutError:
                    await websocket.close(code=1000, reason="idle")
                    break
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if text is None:
                    answer: dict[str, Any] | None = _error("VALIDATION_ERROR", "binary frames are not accepted; "
                                                                               "send JSON text frames")
                else:
                    answer = await state.handle(text)
                if answer is None:  # close
                    await websocket.close(code=1000)
                    break
                await websocket.send_text(json.dumps(answer))
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            active["sessions"] -= 1
            try:
                await run(state.close)
            except RuntimeError:  # the worker thread is gone: the server is shutting down
                state.close()

    return app


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (``port`` 0: a free port the system picks).

    Raises:
        OSError: the address cannot be bound (in use, not an address of this machine ...).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def build_server(served: ServedEnv) -> Any:
    """A ``uvicorn.Server`` of :func:`build_app` with the served limits: frames above ``max_message_bytes``
    close the connection, at most ``max_sessions`` (plus a few for HTTP) connections at once, keepalive
    pings every 20 s. Run it with ``.run(sockets=[listen(...)])``; it logs warnings only."""
    import uvicorn

    config = uvicorn.Config(build_app(served), log_level="warning", ws_max_size=served.max_message_bytes,
                            ws_ping_interval=20.0, ws_ping_timeout=20.0, limit_concurrency=served.max_sessions + 16,
                            timeout_graceful_shutdown=3, proxy_headers=False, server_header=False)
    return uvicorn.Server(config)


def serve(served: ServedEnv, sock: socket.socket, *, on_ready: Callable[[str], None] | None = None) -> None:
    """Run the server (:func:`build_server`) on the listening ``sock`` until SIGINT or SIGTERM.

    Args:
        served: what to serve.
        sock: from :func:`listen`.
        on_ready: called with the server's base URL (``http://host:port``) before it starts serving.
    """
    host, port = sock.getsockname()[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    server = build_server(served)
    if on_ready is not None:
        on_ready(url)
    server.run(sockets=[sock])
