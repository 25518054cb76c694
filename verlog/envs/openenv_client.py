"""Episodes played against an OpenEnv server: the ``openenv:<url>`` environments, and the wire format.

OpenEnv serves an environment over HTTP and a WebSocket. An episode runs on one WebSocket connection to
``<url>/ws`` (one connection is one session, with an environment of its own on the server); each
message is a JSON text frame ``{"type": ..., "data": ...}``:

* ``{"type": "reset", "data": {"seed": 3}}`` and ``{"type": "step", "data": {<action fields>}}`` are
  answered by ``{"type": "observation", "data": {"observation": {...}, "reward": r, "done": d}}``
  (``reward`` a number or null, ``done`` a bool, the observation an object of the server's fields);
* ``{"type": "state"}`` by ``{"type": "state", "data": {...}}``; ``{"type": "close"}`` ends the session;
* a request the server cannot serve by ``{"type": "error", "data": {"message": ..., "code": ...}}``.

``GET /health``, ``GET /schema`` (JSON schemas of the action, observation and state) and ``GET
/metadata`` describe the server. :class:`OpenEnvTextEnv` plays that protocol as a
:class:`~verlog.envs.base.TextEnv`; ``verlog-serve-env`` (:mod:`verlog.serve_env`) serves any Verlog
environment with it, and adds ``GET /verlog/info`` (:data:`INFO_PATH`) so that a Verlog client knows
the richer observation it sends (:func:`observation_payload`).

Mapping to the text-env contract:

* **Action**: the model's raw reply goes to the server unparsed, as the one string field of the
  server's action (``message`` for a Verlog server; for another server the one required string
  property of its action schema, else ``action_field``). The server's own environment parses it.
* **Observation**: a Verlog server's ``text``; another server's ``observation_field``, or its only
  string field, or else all its fields as compact JSON. Characters outside the text space are escaped
  and the text is cut at :data:`~verlog.envs.base.OBS_MAX_CHARS` characters.
* **End**: a Verlog server sends the served env's own ``terminated`` and ``truncated``. OpenEnv itself
  has only ``done``: from another server, ``done`` is a termination unless the observation or its
  metadata says ``truncated: true`` (then a cut); the client's ``max_steps`` truncates as usual.
* **Reward**: the server's (null is 0). A Verlog server also reports whether the reply held a valid
  action; an invalid one adds this env's ``format_penalty`` (the served env adds its own as well).

Every failure is an :class:`OpenEnvError` with one line naming the server and what failed: no
connection within ``connect_timeout_s``, no answer within ``timeout_s``, a closed connection, an error
frame, a malformed answer. The connection is dropped at once (the next reset opens a new session), so
the fault machinery (:mod:`verlog.envs.faults`) counts the failure and rebuilds the env; nothing waits
without a limit.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit, urlunsplit
from urllib.request import ProxyHandler, build_opener

from verlog.catalog import OPENENV_PREFIX, openenv_url
from verlog.envs.adapters import to_text_charset
from verlog.envs.base import INFO_KEYS, OBS_MAX_CHARS, TextEnv
from verlog.envs.registry import register

__all__ = ["ACTION_FIELD", "DEFAULT_INSTRUCTION", "INFO_PATH", "OpenEnvError", "OpenEnvTextEnv", "WS_PATH",
           "json_safe", "observation_payload", "register_server", "ws_url"]

#: the session's WebSocket endpoint, under the server's base URL
WS_PATH = "/ws"
#: Verlog's own description of a served task (``verlog-serve-env``): task, step limit, limits on messages
INFO_PATH = "/verlog/info"
#: the action field of a Verlog server: the model's raw reply
ACTION_FIELD = "message"
#: the system prompt of a server that sends none (servers other than Verlog's)
DEFAULT_INSTRUCTION = ("You are acting in a text environment. Each message shows what you observe; reply with your "
                       "next action.")
_INFO_BYTES = 1 << 20  # most bytes read from a GET answer


class OpenEnvError(RuntimeError):
    """A failure talking to an OpenEnv server; the message is one line naming the server and the failure."""


def ws_url(url: str) -> str:
    """The WebSocket session URL (``ws``/``wss`` + :data:`WS_PATH`) of a server's base URL."""
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + WS_PATH, "", ""))


def _http_url(url: str, path: str) -> str:
    """The ``http``/``https`` URL of ``path`` under a server's base URL."""
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + path, "", ""))


def json_safe(value: Any) -> Any:
    """``value`` as plain JSON data: numbers, strings, bools, None, lists and str-keyed dicts are kept
    (numpy scalars and arrays become numbers and lists, bytes become hex, tuples lists); anything else
    becomes its ``str``. Non-finite floats become ``None`` (JSON has no NaN)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    item = getattr(value, "tolist", None)  # numpy scalars and arrays
    if callable(item):
        return json_safe(item())
    return str(value)


def observation_payload(env: TextEnv, obs: str, reward: float | None, terminated: bool, truncated: bool,
                        info: dict[str, Any]) -> dict[str, Any]:
    """The ``data`` of an observation frame for a Verlog env's reset (``reward`` None) or step.

    OpenEnv's part: ``observation`` (an object), ``reward``, ``done`` (``terminated or truncated``).
    The observation carries the text-env contract in full: ``text`` (the observation string),
    ``terminated`` and ``truncated`` (the env's own flags, which ``done`` merges), the :data:`INFO_KEYS`
    of ``info`` (``instruction``, ``valid_actions``, ``progression``, ``success``, ``episode_step``,
    ``action``, ``action_valid``, ``game_reward``, ``context``), ``state_key`` (hex, or None when the
    game reports none), ``info`` (the game's own extra info keys, as :func:`json_safe` data) and an
    empty ``metadata``.

    Raises:
        KeyError: ``info`` lacks one of :data:`INFO_KEYS` (not a Verlog env's info).
    """
    try:
        state_key: str | None = env.unwrapped.state_key.hex()
    except (NotImplementedError, AttributeError, RuntimeError):
        state_key = None
    observation = {"text": obs, "terminated": bool(terminated), "truncated": bool(truncated),
                   **{key: json_safe(info[key]) for key in INFO_KEYS}, "state_key": state_key,
                   "info": {k: json_safe(v) for k, v in info.items() if k not in INFO_KEYS}, "metadata": {}}
    return {"observation": observation, "reward": None if reward is None else float(reward),
            "done": bool(terminated or truncated)}


@dataclass
class _Answer:
    """One decoded observation frame."""

    text: str
    reward: float
    terminated: bool
    truncated: bool
    instruction: str | None = None
    valid_actions: list[str] = field(default_factory=list)
    progression: float = 0.0
    success: bool = False
    context: str = ""
    action: str | None = None
    action_valid: bool = True
    game_reward: float | None = None
    state_key: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} is {value!r}, not a finite number")
    return float(value)


def _typed(observation: dict[str, Any], key: str, kind: type | tuple[type, ...], optional: bool = False) -> Any:
    value = observation.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ValueError(f"observation.{key} is {type(value).__name__}, not {names}")
    return value


class OpenEnvTextEnv(TextEnv):
    """A text env whose game runs on an OpenEnv server (see the module docstring for the mapping).

    Built by the registry for ``env.task=openenv:<url>``; extra arguments come from ``env.kwargs``.
    Construction asks the server for :data:`INFO_PATH` (a Verlog server) or ``/schema`` (another one);
    the WebSocket session opens at the first reset and stays open across episodes.

    Args:
        url: the server's base URL (``http``, ``https``, ``ws`` or ``wss``), e.g. ``http://127.0.0.1:8000``.
        max_steps: the client's step limit; ``None`` takes the served env's limit from a Verlog server
            (another server's episodes then end only when it says so).
        format_penalty: added (<= 0) to the reward of a step whose reply the server reports invalid (a
            Verlog server reports it; the served env applies its own penalty too).
        timeout_s: seconds to wait for the answer to one reset, step or GET (> 0).
        connect_timeout_s: seconds to wait for a connection (> 0).
        action_field: the action's field that carries the reply (``None``: found from the server).
        observation_field: the observation's field that holds the text (``None``: see the module docstring).
        instruction: the system prompt when the server sends none (``None``: :data:`DEFAULT_INSTRUCTION`).
        max_message_bytes: the largest answer accepted (bytes, > 0).

    Raises:
        OpenEnvError: the server cannot be reached or describes itself in a malformed way (one line).
        TypeError / ValueError: a bad argument (the message names it).
    """

    #: any reply goes to the server, whose env judges it
    actions_are_closed = False
    #: never executed: every reply is sent as it is
    default_action = ""

    def __init__(self, url: str, *, max_steps: int | None = None, format_penalty: float = 0.0,
                 timeout_s: float = 30.0, connect_timeout_s: float = 10.0, action_field: str | None = None,
                 observation_field: str | None = None, instruction: str | None = None,
                 max_message_bytes: int = 4 << 20) -> None:
        for name, value in (("timeout_s", timeout_s), ("connect_timeout_s", connect_timeout_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if isinstance(max_message_bytes, bool) or not isinstance(max_message_bytes, int) or max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes must be an int >= 1024, got {max_message_bytes!r}")
        for name, value in (("action_field", action_field), ("observation_field", observation_field),
                            ("instruction", instruction)):
            if value is not None and (not isinstance(value, str) or not value):
                raise TypeError(f"{name} must be a non-empty str or None, got {value!r}")
        self.url = openenv_url(OPENENV_PREFIX + url)
        if self.url is None:  # pragma: no cover - openenv_url returns a URL for every prefixed name
            raise ValueError(f"not a server URL: {url!r}")
        self.timeout_s, self.connect_timeout_s = float(timeout_s), float(connect_timeout_s)
        self.max_message_bytes = max_message_bytes
        self._opener = build_opener(ProxyHandler({}))  # a server on loopback is never reached through a proxy
        self.served: dict[str, Any] | None = self._get_json(INFO_PATH, missing_ok=True)
        if self.served is not None:  # a Verlog server
            served_steps = self.served.get("max_steps")
            if served_steps is not None and (isinstance(served_steps, bool) or not isinstance(served_steps, int)
                                             or served_steps < 1):
                raise OpenEnvError(f"OpenEnv server {self.url}: malformed {INFO_PATH}: max_steps is {served_steps!r}")
            max_steps = served_steps if max_steps is None else max_steps
            self.action_field = action_field or ACTION_FIELD
            self.observation_field = observation_field or "text"
        else:
            self.action_field = action_field or self._schema_action_field()
            self.observation_field = observation_field
        super().__init__(max_steps=max_steps, format_penalty=format_penalty)
        self._default_instruction = instruction or DEFAULT_INSTRUCTION
        self._ws: Any = None
        self._answer: _Answer | None = None

    # ------------------------------------------------------------------ HTTP
    def _fail(self, what: str, why: str) -> OpenEnvError:
        return OpenEnvError(f"OpenEnv server {self.url}: {what}: {' '.join(str(why).split())[:300]}")

    def _get_json(self, path: str, *, missing_ok: bool = False) -> Any:
        """``GET path`` as JSON; ``None`` for a 404 when ``missing_ok``.

        Raises:
            OpenEnvError: no connection, no answer in time, an HTTP error, a body over 1 MiB, or not JSON.
        """
        try:
            with self._opener.open(_http_url(self.url, path), timeout=self.connect_timeout_s) as response:
                body = response.read(_INFO_BYTES + 1)
        except HTTPError as exc:
            if exc.code == 404 and missing_ok:
                return None
            raise self._fail(f"GET {path}", f"HTTP {exc.code} {exc.reason}") from None
        except (URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise self._fail(f"GET {path}", f"cannot connect ({reason})") from None
        if len(body) > _INFO_BYTES:
            raise self._fail(f"GET {path}", f"answer longer than {_INFO_BYTES} bytes")
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise self._fail(f"GET {path}", f"answer is not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise self._fail(f"GET {path}", f"answer is a JSON {type(data).__name__}, not an object")
        return data

    def _schema_action_field(self) -> str:
        """The one required string property of the server's action schema (``metadata`` aside), else
        :data:`ACTION_FIELD`. A server without ``/schema`` gets :data:`ACTION_FIELD`.

        Raises:
            OpenEnvError: the schema cannot be fetched (other than a 404) or is malformed.
        """
        schema = self._get_json("/schema", missing_ok=True)
        if schema is None:
            return ACTION_FIELD
        action = schema.get("action")
        if not isinstance(action, dict):
            raise self._fail("GET /schema", "no action schema object")
        properties = action.get("properties") or {}
        required = [k for k in action.get("required") or [] if k != "metadata"]
        strings = [k for k in required if isinstance(properties.get(k), dict) and properties[k].get("type") == "string"]
        return strings[0] if len(strings) == 1 and len(required) == 1 else ACTION_FIELD

    # ------------------------------------------------------------------ WebSocket session
    def _connection(self) -> Any:
        if self._ws is None:
            from websockets.exceptions import InvalidHandshake, InvalidURI
            from websockets.sync.client import connect

            try:
                self._ws = connect(ws_url(self.url), open_timeout=self.connect_timeout_s, close_timeout=1.0,
                                   max_size=self.max_message_bytes, ping_interval=None, proxy=None)
            except TimeoutError:
                raise self._fail("connect", f"no WebSocket connection within {self.connect_timeout_s:g} s") from None
            except (OSError, InvalidHandshake, InvalidURI) as exc:
                raise self._fail("connect", f"{type(exc).__name__}: {exc}") from None
        return self._ws

    def _drop(self) -> None:
        """Close the session's connection without waiting for the server (a desynced or broken one)."""
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                ws.close_timeout = 0.5
                ws.close()
            except Exception:  # noqa: BLE001 - it is being thrown away
                pass

    def _exchange(self, what: str, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request of the session and return the ``data`` of its observation frame.

        Raises:
            OpenEnvError: see the module docstring; the connection is dropped first.
        """
        from websockets.exceptions import ConnectionClosed, WebSocketException

        ws = self._connection()
        try:
            ws.send(json.dumps(message))
            raw = ws.recv(timeout=self.timeout_s)
        except TimeoutError:
            self._drop()
            raise self._fail(what, f"no answer within {self.timeout_s:g} s") from None
        except ConnectionClosed as exc:
            self._drop()
            rcvd = exc.rcvd
            detail = f" (code {rcvd.code}{': ' + rcvd.reason if rcvd.reason else ''})" if rcvd is not None else ""
            raise self._fail(what, f"the server closed the connection{detail}") from None
        except (OSError, WebSocketException) as exc:
            self._drop()
            raise self._fail(what, f"{type(exc).__name__}: {exc}") from None
        except BaseException:  # an alarm (step timeout) or an interrupt mid-exchange: the session is desynced
            self._drop()
            raise
        try:
            frame = json.loads(raw)
        except ValueError as exc:
            self._drop()
            raise self._fail(what, f"malformed answer, not JSON ({exc})") from None
        kind = frame.get("type") if isinstance(frame, dict) else None
        data = frame.get("data") if isinstance(frame, dict) else None
        if kind == "error":
            self._drop()
            error = data if isinstance(data, dict) else {}
            raise self._fail(what, f"the server answered with an error: {error.get('code', 'unknown')}: "
                                   f"{error.get('message', '')}")
        if kind != "observation" or not isinstance(data, dict):
            self._drop()
            raise self._fail(what, f"malformed answer: expected an observation frame, got {str(raw)[:120]!r}")
        return data

    def _decode(self, what: str, data: dict[str, Any]) -> _Answer:
        """The answer in an observation frame's ``data``.

        Raises:
            OpenEnvError: a missing or mistyped field (the connection is dropped).
        """
        try:
            observation = data.get("observation")
            if not isinstance(observation, dict):
                raise ValueError(f"observation is {type(observation).__name__}, not an object")
            reward = data.get("reward")
            reward = 0.0 if reward is None else _number(reward, "reward")
            done = data.get("done", False)
            if not isinstance(done, bool):
                raise ValueError(f"done is {done!r}, not a bool")
            if self.served is not None:
                return self._decode_verlog(observation, reward, done)
            return self._decode_other(observation, data, reward, done)
        except ValueError as exc:
            self._drop()
            raise self._fail(what, f"malformed answer: {exc}") from None

    def _decode_verlog(self, observation: dict[str, Any], reward: float, done: bool) -> _Answer:
        terminated, truncated = _typed(observation, "terminated", bool), _typed(observation, "truncated", bool)
        if done != (terminated or truncated):
            raise ValueError(f"done={done} disagrees with terminated={terminated}, truncated={truncated}")
        actions = _typed(observation, "valid_actions", list)
        if not all(isinstance(a, str) for a in actions):
            raise ValueError("observation.valid_actions holds a non-string")
        progression = _number(observation.get("progression"), "observation.progression")
        if not 0.0 <= progression <= 1.0:
            raise ValueError(f"observation.progression is {progression}, not in [0, 1]")
        info = _typed(observation, "info", dict)
        if any(k in INFO_KEYS for k in info):
            raise ValueError("observation.info repeats a reserved info key")
        return _Answer(
            text=self._text(_typed(observation, self.observation_field, str)), reward=reward, terminated=terminated,
            truncated=truncated, instruction=_typed(observation, "instruction", str), valid_actions=list(actions),
            progression=progression, success=_typed(observation, "success", bool),
            context=_typed(observation, "context", str), action=_typed(observation, "action", str),
            action_valid=_typed(observation, "action_valid", bool),
            game_reward=_number(observation.get("game_reward"), "observation.game_reward"),
            state_key=_typed(observation, "state_key", str, optional=True), info=info)

    def _decode_other(self, observation: dict[str, Any], data: dict[str, Any], reward: float, done: bool) -> _Answer:
        metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
        inner = observation.get("metadata") if isinstance(observation.get("metadata"), dict) else {}
        cut = done and (observation.get("truncated") is True or metadata.get("truncated") is True
                        or inner.get("truncated") is True)
        fields = {k: v for k, v in observation.items() if k not in ("metadata", "reward", "done")}
        if self.observation_field is not None:
            text = _typed(observation, self.observation_field, str)
        else:
            strings = [v for v in fields.values() if isinstance(v, str)]
            text = strings[0] if len(strings) == 1 else json.dumps(json_safe(fields), sort_keys=True,
                                                                    separators=(",", ":"), ensure_ascii=False)
        actions = observation.get("valid_actions")
        valid = list(actions) if isinstance(actions, list) and all(isinstance(a, str) for a in actions) else []
        success = observation.get("success") is True
        return _Answer(text=self._text(text), reward=reward, terminated=done and not cut, truncated=cut,
                       valid_actions=valid, success=success, progression=1.0 if success else 0.0)

    @staticmethod
    def _text(text: str) -> str:
        return to_text_charset(text)[:OBS_MAX_CHARS]

    # ------------------------------------------------------------------ the game
    def _reset_game(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        data: dict[str, Any] = {} if seed is None else {"seed": int(seed)}
        self._answer = None
        answer = self._decode("reset", self._exchange("reset", {"type": "reset", "data": data}))
        if answer.terminated or answer.truncated:
            self._drop()
            raise self._fail("reset", "the episode is over at its reset (done is true)")
        self._answer = answer
        return answer.text, dict(answer.info)

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._answer = None
        message = {"type": "step", "data": {self.action_field: action}}
        answer = self._decode("step", self._exchange("step", message))
        self._answer = answer
        return answer.text, answer.reward, answer.terminated, answer.truncated, dict(answer.info)

    def parse_action(self, reply: str) -> str:
        """The reply itself: the server's env parses it."""
        return reply

    def step(self, reply: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """As :meth:`TextEnv.step`, with what the server reports about the reply: ``info["action"]`` is
        the action it executed, ``info["action_valid"]`` whether the reply held one (an invalid reply
        adds ``format_penalty`` to the reward) and ``info["game_reward"]`` its reward before penalties.

        Raises:
            OpenEnvError: the exchange with the server failed (one line).
            TypeError / RuntimeError: as :meth:`TextEnv.step`.
        """
        obs, reward, terminated, truncated, info = super().step(reply)
        answer = self._answer
        if answer is not None and answer.action is not None:
            info["action"] = answer.action
            info["action_valid"] = answer.action_valid
            if answer.game_reward is not None:
                info["game_reward"] = answer.game_reward
            if not answer.action_valid:
                reward += self.format_penalty
        return obs, reward, terminated, truncated, info

    # ------------------------------------------------------------------ what the server reports
    @property
    def instruction(self) -> str:
        """The served env's system prompt of this episode, or the configured one when the server sends none."""
        if self._answer is not None and self._answer.instruction is not None:
            return self._answer.instruction
        return self._default_instruction

    @property
    def valid_actions(self) -> list[str]:
        """The actions the server lists in its last observation (empty when it lists none)."""
        return list(self._answer.valid_actions) if self._answer is not None else []

    @property
    def progression(self) -> float:
        """The served env's progression (another server: 1 after it reports ``success: true``, else 0)."""
        return self._answer.progression if self._answer is not None else 0.0

    @property
    def success(self) -> bool:
        """Whether the server reports the episode solved."""
        return self._answer.success if self._answer is not None else False

    @property
    def context(self) -> str:
        """The served env's current-only context."""
        return self._answer.context if self._answer is not None else ""

    @property
    def state_key(self) -> bytes:
        """The served env's state key (sent as hex by a Verlog server).

        Raises:
            NotImplementedError: the server reports none.
        """
        if self._answer is None or self._answer.state_key is None:
            raise NotImplementedError(f"OpenEnv server {self.url} reports no state key (needed by algo.algorithm=gigpo)")
        try:
            return bytes.fromhex(self._answer.state_key)
        except ValueError:
            raise self._fail("state key", "observation.state_key is not hex") from None

    def close(self) -> None:
        """End the session: a ``close`` frame (best effort), then the connection is closed."""
        ws = self._ws
        if ws is not None:
            try:
                ws.send(json.dumps({"type": "close"}))
            except Exception:  # noqa: BLE001 - the server may be gone already
                pass
        self._drop()
        super().close()


def register_server(name: str) -> None:
    """Register the environment name ``openenv:<url>`` (a factory of :class:`OpenEnvTextEnv` for ``<url>``).

    Raises:
        ValueError: ``name`` is not ``openenv:<url>`` with a valid URL (one line).
    """
    url = openenv_url(name)
    if url is None:
        raise ValueError(f"{name!r} is not an OpenEnv server name openenv:<url>")
    register(name, functools.partial(OpenEnvTextEnv, url), replace=True)
