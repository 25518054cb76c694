"""OpenEnv interoperability: ``verlog-serve-env`` and the ``openenv:<url>`` client env, against each other,
against OpenEnv's own client and server (when its library is installed), and when things go wrong."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Iterator

import pytest

pytest.importorskip("websockets")

from fastapi import FastAPI, WebSocket  # noqa: E402  (module level: FastAPI resolves the route's annotations here)

from helpers import cli_error_line, train_cli  # noqa: E402
from verlog.cli import serve_env_main  # noqa: E402
from verlog.config import ConfigError  # noqa: E402
from verlog.envs.base import INFO_KEYS  # noqa: E402
from verlog.envs.faults import FAULTS_KEY, EnvFaultError, make_guarded_env  # noqa: E402
from verlog.envs.openenv_client import OpenEnvError, ws_url  # noqa: E402
from verlog.envs.registry import make_env  # noqa: E402
from verlog.logging import read_metrics  # noqa: E402
from verlog.preflight import check_env_task  # noqa: E402
from verlog.serve_env import ServedEnv, build_server, listen  # noqa: E402

TASK = "babyai/easy_goto"
SERVED_STEPS = 10  # the served env's step limit, so that episodes that do not reach the goal are truncated
#: a fixed reply sequence: valid actions, reasoning before the action, and replies without one
REPLIES = ["ACTION: go forward", "ACTION: turn left", "I will go on.\nACTION: go forward", "no action here",
           "ACTION: turn right", "ACTION: go forward", "ACTION: go forward", "ACTION: pick up", "ACTION: turn right",
           "ACTION: go forward", "ACTION: go forward", "ACTION: toggle"]


def start_server(*args: str, timeout: float = 180.0) -> tuple[subprocess.Popen, str]:
    """``verlog-serve-env <args> --port 0`` in a subprocess; returns it and its base URL (from its first line)."""
    proc = subprocess.Popen([sys.executable, "-c", "from verlog.cli import serve_env_main; serve_env_main()", *args,
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        proc.kill()
        raise AssertionError(f"verlog-serve-env printed nothing in {timeout:g} s") from None
    if not line.startswith("serving "):
        proc.kill()
        raise AssertionError(f"verlog-serve-env failed: {line!r} {proc.stderr.read()[-2000:]}")
    url = line.split(" at ", 1)[1].split(" ", 1)[0]
    return proc, url


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    proc, url = start_server(TASK, "--max-steps", str(SERVED_STEPS))
    yield url
    stop(proc)


@contextlib.contextmanager
def app_in_thread(app: Any) -> Iterator[str]:
    """Serve an ASGI ``app`` (or a ready ``uvicorn.Server``) on a free loopback port from a thread of this
    process; yields its base URL."""
    import uvicorn

    sock = listen("127.0.0.1", 0)
    srv = app if isinstance(app, uvicorn.Server) else uvicorn.Server(uvicorn.Config(app, log_level="error"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
        sock.close()


def play(env: Any, seed: int) -> list[tuple]:
    """The reset and each step of ``REPLIES`` (until the episode ends) as comparable tuples."""
    obs, info = env.reset(seed=seed)
    trace: list[tuple] = [("reset", obs, info)]
    for reply in REPLIES:
        obs, reward, terminated, truncated, info = env.step(reply)
        trace.append(("step", obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return trace


# ---------------------------------------------------------------------------------------------- round trip
def test_served_env_plays_like_the_in_process_env(server):
    """20 seeds, the same replies against the served env and the in-process one: every observation, reward,
    terminated/truncated flag and info is identical."""
    remote = make_env(f"openenv:{server}")
    local = make_env(TASK, max_steps=SERVED_STEPS)
    assert remote.max_steps == SERVED_STEPS  # taken from the server
    ends = {"terminated": 0, "truncated": 0}
    try:
        for seed in range(20):
            got, want = play(remote, seed), play(local, seed)
            assert got == want, f"seed {seed}"
            assert remote.state_key == local.state_key
            last = want[-1]
            assert last[3] or last[4]  # more replies than the step limit: every episode ends
            ends["terminated" if last[3] else "truncated"] += 1
    finally:
        remote.close()
    assert ends["truncated"] > 0, ends


def test_async_vector_env_of_served_envs(server):
    """Forked vector-env workers each open their own session: the same observations as local envs."""
    from verlog.envs import make_vector_env

    remote = make_vector_env(f"openenv:{server}", 3, seed=5, mode="async")
    local = make_vector_env(TASK, 3, seed=5, mode="sync", env_kwargs={"max_steps": SERVED_STEPS})
    try:
        assert list(remote.reset()[0]) == list(local.reset()[0])
        for reply in REPLIES[:4]:
            got, want = remote.step([reply] * 3), local.step([reply] * 3)
            assert list(got[0]) == list(want[0]) and list(got[1]) == list(want[1])
            assert list(got[2]) == list(want[2]) and list(got[3]) == list(want[3])
    finally:
        remote.close()
        local.close()


def test_invalid_reply_is_reported_and_penalised_by_the_client(server):
    """The server reports that a reply held no valid action; the client adds its own format penalty."""
    remote = make_env(f"openenv:{server}", format_penalty=-0.5)
    try:
        remote.reset(seed=1)
        obs, reward, _, _, info = remote.step("no action here")
        assert obs.startswith("Your previous reply did not contain a valid action")
        assert reward == -0.5 and info["action_valid"] is False and info["action"] == "go forward"
        _, reward, _, _, info = remote.step("ACTION: turn left")
        assert reward == 0.0 and info["action_valid"] is True and info["action"] == "turn left"
    finally:
        remote.close()


def test_server_describes_itself(server):
    from urllib.request import urlopen

    with urlopen(f"{server}/verlog/info", timeout=10) as response:
        info = json.load(response)
    assert info["task"] == TASK and info["max_steps"] == SERVED_STEPS
    with urlopen(f"{server}/schema", timeout=10) as response:
        schema = json.load(response)
    assert schema["action"]["required"] == ["message"] and "text" in schema["observation"]["properties"]
    with urlopen(f"{server}/health", timeout=10) as response:
        assert json.load(response) == {"status": "healthy"}


# ---------------------------------------------------------------------------------------------- training
@pytest.mark.slow
def test_verlog_train_against_a_served_env(tmp_path):
    """Two iterations of the tiny recipe with env.task=openenv:<url>, the env served by verlog-serve-env."""
    proc, url = start_server(TASK, "--max-steps", "12", "--instruction-style", "brief", "--text-style", "tidy")
    try:
        task = f"openenv:{url}"
        train_cli("tiny", "iterations=2", "ppo.critic_warmup_iterations=1", f"env.task={task}", "env.num_envs=2",
                  "env.vector_mode=sync", "rollout.turns_per_env=4", "ppo.minibatches=2", "ppo.micro_batch_size=4",
                  "format_warmup.steps=10", "format_warmup.episodes=2", "model.tiny.corpus_episodes=4",
                  "eval.episodes=2", "eval.num_envs=2", "eval.baseline=false", "logging.progress=false",
                  f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}", "name=openenv")
    finally:
        stop(proc)
    rows = read_metrics(tmp_path / "openenv" / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [1, 2] and [r["turns"] for r in rows] == [8, 16]
    assert all(r.get("env/faults", 0) == 0 for r in rows), rows
    ev = json.loads((tmp_path / "openenv" / "eval.json").read_text())
    assert ev["task"] == task and ev["episodes"] == 2


# ---------------------------------------------------------------------------------------------- OpenEnv's library
def test_openenv_own_client_plays_our_server(server):
    """OpenEnv's generic client talks to verlog-serve-env: the same observations and rewards as in process."""
    core = pytest.importorskip("openenv.core")
    local = make_env(TASK, max_steps=SERVED_STEPS)
    with core.GenericEnvClient(base_url=server, message_timeout_s=60).sync() as client:
        for seed in (0, 7):
            result = client.reset(seed=seed)
            obs, _ = local.reset(seed=seed)
            assert result.observation["text"] == obs and result.reward is None and result.done is False
            for reply in REPLIES:
                result = client.step({"message": reply})
                obs, reward, terminated, truncated, info = local.step(reply)
                assert result.observation["text"] == obs and result.reward == reward
                assert result.done == (terminated or truncated)
                assert (result.observation["terminated"], result.observation["truncated"]) == (terminated, truncated)
                if result.done:
                    break
        state = client.state()
        assert state["task"] == TASK and state["step_count"] >= 1
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            client.step({"code": "print(1)"})


def test_our_client_plays_an_openenv_server():
    """The client env against a server built with OpenEnv's own library: a countdown game whose action is
    ``{"word": str}`` and whose observation is ``{"prompt": str, "left": int}``; ``done`` is a termination,
    unless the server marks it ``truncated`` in its metadata."""
    core = pytest.importorskip("openenv.core")
    from pydantic import Field

    class WordAction(core.Action):
        word: str = Field(..., description="a word")

    class CountObservation(core.Observation):
        prompt: str = ""
        left: int = 0

    class Countdown(core.Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self._left, self._state = 0, core.State()

        def reset(self, seed=None, episode_id=None, **kwargs):
            self._left = 3 + (seed or 0) % 3
            return CountObservation(prompt=f"say stop or wait; {self._left} left", left=self._left)

        def step(self, action, timeout_s=None, **kwargs):
            self._left -= 1
            if action.word == "stop":
                return CountObservation(prompt="stopped", left=self._left, done=True, reward=1.0)
            if self._left == 0:
                return CountObservation(prompt="out of time", left=0, done=True, reward=0.0,
                                        metadata={"truncated": True})
            return CountObservation(prompt=f"{action.word}; {self._left} left", left=self._left, reward=0.1)

        @property
        def state(self):
            return self._state

    app = core.create_app(Countdown, WordAction, CountObservation, env_name="countdown", max_concurrent_envs=2)
    with app_in_thread(app) as url:
        env = make_env(f"openenv:{url}", max_steps=10)
        try:
            assert env.action_field == "word"  # the one required string field of the action schema
            obs, info = env.reset(seed=1)
            assert obs == "say stop or wait; 4 left" and set(INFO_KEYS) <= set(info)
            assert env.step("wait")[:4] == ("wait; 3 left", pytest.approx(0.1), False, False)
            assert env.step("stop")[:4] == ("stopped", 1.0, True, False)
            env.reset(seed=0)
            steps = [env.step("wait")[:4] for _ in range(3)]
            assert steps[-1] == ("out of time", 0.0, False, True)  # the server's own cut
        finally:
            env.close()


# ---------------------------------------------------------------------------------------------- faults
def free_port() -> int:
    sock = listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    return port


def test_unreachable_server_is_one_line():
    start = time.monotonic()
    with pytest.raises(OpenEnvError) as exc:
        make_env(f"openenv:http://127.0.0.1:{free_port()}", connect_timeout_s=2)
    assert time.monotonic() - start < 10
    assert "\n" not in str(exc.value) and "cannot connect" in str(exc.value)


def test_silent_server_times_out():
    """A server that accepts connections but never answers: construction fails within the timeout."""
    sock = listen("127.0.0.1", 0)
    try:
        start = time.monotonic()
        with pytest.raises(OpenEnvError, match="cannot connect"):
            make_env(f"openenv:http://127.0.0.1:{sock.getsockname()[1]}", connect_timeout_s=1)
        assert time.monotonic() - start < 10
    finally:
        sock.close()


def fake_server(answer: Any) -> Any:
    """A FastAPI app that describes itself as a Verlog server and answers every frame with ``answer(frame)``
    (a str to send; ``None``: never answer)."""
    app = FastAPI()

    @app.get("/verlog/info")
    def info() -> dict:
        return {"task": "fake", "max_steps": 5}

    async def session(websocket: WebSocket) -> None:
        await websocket.accept()
        while True:
            text = await websocket.receive_text()
            reply = answer(text)
            if reply is not None:
                await websocket.send_text(reply)

    app.add_api_websocket_route("/ws", session)
    return app


@pytest.mark.parametrize("answer, message", [
    (lambda frame: None, "no answer within 1 s"),
    (lambda frame: "not json", "not JSON"),
    (lambda frame: json.dumps({"type": "observation", "data": {"observation": {"text": 3}, "done": False}}),
     "malformed answer"),
    (lambda frame: json.dumps({"type": "observation", "data": {"observation": {}, "reward": "much"}}), "reward"),
    (lambda frame: json.dumps({"type": "error", "data": {"message": "broken", "code": "EXECUTION_ERROR"}}),
     "EXECUTION_ERROR: broken"),
    (lambda frame: json.dumps({"type": "state", "data": {}}), "expected an observation frame"),
])
def test_bad_answers_are_one_line_errors(answer, message):
    with app_in_thread(fake_server(answer)) as url:
        env = make_env(f"openenv:{url}", timeout_s=1)
        start = time.monotonic()
        with pytest.raises(OpenEnvError) as exc:
            env.reset(seed=0)
        assert time.monotonic() - start < 10
        assert message in str(exc.value) and "\n" not in str(exc.value)
        assert env._ws is None  # the session was dropped: the next reset opens a new one
        env.close()


def test_a_server_that_dies_is_a_counted_fault():
    """The server process is killed mid-episode: the step ends truncated with a counted fault, and the
    rebuild that cannot reach the server is an EnvFaultError, not a hang."""
    proc, url = start_server(TASK)
    env = make_guarded_env(f"openenv:{url}", {"timeout_s": 5, "connect_timeout_s": 2}, step_timeout_s=30,
                           restart_attempts=1)
    try:
        first, _ = env.reset(seed=0)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        start = time.monotonic()
        obs, reward, terminated, truncated, info = env.step("ACTION: go forward")
        assert obs == first and reward == 0.0 and (terminated, truncated) == (False, True)
        assert info[FAULTS_KEY] == 1 and "OpenEnv server" in info["env_fault"]
        with pytest.raises(EnvFaultError, match="cannot connect"):
            env.reset()
        assert time.monotonic() - start < 30
    finally:
        stop(proc)


# ---------------------------------------------------------------------------------------------- server limits
@pytest.fixture(scope="module")
def small_server() -> Iterator[str]:
    """The served task in a thread of this process, with one session at most."""
    with app_in_thread(build_server(ServedEnv(TASK, max_sessions=1, max_message_bytes=4096))) as url:
        yield url


def exchange(ws: Any, frame: Any) -> dict:
    ws.send(frame if isinstance(frame, (str, bytes)) else json.dumps(frame))
    return json.loads(ws.recv(timeout=30))


def test_server_refuses_bad_frames(small_server):
    from websockets.sync.client import connect

    with connect(ws_url(small_server), proxy=None) as ws:
        assert exchange(ws, "{not json")["data"]["code"] == "INVALID_JSON"
        assert exchange(ws, {"type": "mcp", "data": {}})["data"]["code"] == "UNKNOWN_TYPE"
        assert exchange(ws, {"type": "step", "data": {"message": "ACTION: go forward"}})["data"]["code"] \
            == "EXECUTION_ERROR"  # before any reset
        assert exchange(ws, {"type": "reset", "data": {"seed": "3"}})["data"]["code"] == "VALIDATION_ERROR"
        assert exchange(ws, {"type": "reset", "data": {"seed": -1}})["data"]["code"] == "VALIDATION_ERROR"
        assert exchange(ws, [1, 2])["data"]["code"] == "VALIDATION_ERROR"
        assert exchange(ws, b"\x80\x04\x95pickle")["data"]["code"] == "VALIDATION_ERROR"  # binary: never unpickled
        assert exchange(ws, {"type": "reset", "data": {"seed": 3}})["type"] == "observation"
        assert exchange(ws, {"type": "step", "data": {"message": "x", "code": "import os"}})["data"]["code"] \
            == "VALIDATION_ERROR"
        # a second session is over --max-sessions
        with connect(ws_url(small_server), proxy=None) as other:
            assert json.loads(other.recv(timeout=30))["data"]["code"] == "CAPACITY_REACHED"
        # a frame over the size limit closes the connection
        from websockets.exceptions import ConnectionClosed

        with pytest.raises(ConnectionClosed):
            exchange(ws, {"type": "step", "data": {"message": "x" * 10_000}})


def test_serve_cli_refuses_bad_arguments(capsys):
    line = cli_error_line(serve_env_main, [TASK, "--host", "0.0.0.0"], capsys)
    assert line.startswith("error: --host:") and "--allow-remote" in line
    line = cli_error_line(serve_env_main, [TASK, "--env-kwargs", "[1]"], capsys)
    assert line.startswith("error: --env-kwargs:")
    line = cli_error_line(serve_env_main, ["babyai/nope", "--port", "0"], capsys)
    assert line.startswith("error: task: babyai/nope")
    line = cli_error_line(serve_env_main, [TASK, "--max-steps", "0", "--port", "0"], capsys)
    assert line.startswith("error: --max-steps:")


def test_bad_openenv_task_is_refused_before_training():
    with pytest.raises(ConfigError, match="^env.task: .*scheme"):
        check_env_task("openenv:ftp://127.0.0.1:8000")
    with pytest.raises(ConfigError, match="^env.task: "):
        check_env_task("openenv:http://127.0.0.1:99999")
    check_env_task("openenv:http://127.0.0.1:8000")  # the form only: nothing is contacted


@pytest.mark.slow
def test_verlog_train_with_no_server_is_one_line(tmp_path):
    proc = train_cli("tiny", f"env.task=openenv:http://127.0.0.1:{free_port()}", f"run_root={tmp_path}",
                     check=False, timeout=300)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("[")]
    assert len(lines) == 1 and lines[0].startswith("error: env.task: ") and "cannot connect" in lines[0], proc.stderr


def test_an_env_that_stays_down_ends_training_with_one_line(monkeypatch, capsys, tmp_path):
    """When the fault machinery gives up (a server that stays down), verlog-train ends with one error line and
    the command to resume, exit status 1."""
    import verlog.cli
    import verlog.trainer

    class DownTrainer:
        run_dir = tmp_path

        def __init__(self, cfg: Any) -> None:
            pass

        def train(self) -> dict:
            raise EnvFaultError("openenv:http://127.0.0.1:1: 3 restarts failed in a row; last: cannot connect")

        def resume_command(self) -> str:
            return f"verlog-train {tmp_path}/config.yaml resume={tmp_path}"

    monkeypatch.setattr(verlog.trainer, "Trainer", DownTrainer)
    monkeypatch.setattr(verlog.cli, "_use_threads", lambda threads: None)
    with pytest.raises(SystemExit) as exc:
        verlog.cli.train_main(["tiny", f"run_root={tmp_path}"])
    assert exc.value.code == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines[0].startswith("error: openenv:http://127.0.0.1:1: 3 restarts failed") and len(lines) == 2
    assert lines[1].startswith("resume with: verlog-train")
