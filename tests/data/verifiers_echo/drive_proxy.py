"""Run the echo taskset's tasks against Verlog's proxy with verifiers' own eval client (run it with
the verifiers virtualenv's python): one streamed request per task, each with its own X-Session-ID,
scored by the task's ``@vf.reward`` and the reward posted to the proxy's ``/reward``.

Usage: ``python drive_proxy.py BASE_URL NUM_TASKS`` (BASE_URL ends in ``/v1``); prints one JSON line
per task: session, word, content, usage, reward.
"""

import asyncio
import json
import sys
import uuid
from types import SimpleNamespace

import httpx
from verifiers.v1.clients.eval import EvalClient
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.dialects.chat import ChatDialect

from verlog_echo.taskset import EchoConfig, EchoTaskset


def read_events(raw: bytes) -> tuple[str, dict | None, bool]:
    """The content, usage and whether ``[DONE]`` came, from a chat-completions event stream."""
    content, usage, done = "", None, False
    for event in raw.decode().split("\n\n"):
        if not event.startswith("data: "):
            continue
        data = event[len("data: "):]
        if data == "[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            content += choice["delta"].get("content") or ""
    return content, usage, done


async def run_task(client: EvalClient, task, base_url: str) -> dict:
    """One task: stream its prompt through the relay, score the reply, post the reward."""
    session = uuid.uuid4().hex
    body = {"model": "verlog", "messages": [{"role": "user", "content": task.data.prompt}], "max_tokens": 16,
            "stream": True, "stream_options": {"include_usage": True}}
    reply = await client.relay(ChatDialect(), body, session_id=session)
    try:
        raw = b"".join([chunk async for chunk in reply.chunks])
    finally:
        await reply.close()
    content, usage, done = read_events(raw)
    reward = await task.echoed(SimpleNamespace(last_reply=content))
    root = base_url.removesuffix("/v1")
    async with httpx.AsyncClient() as http:
        posted = await http.post(f"{root}/reward", json={"reward": reward}, headers={"X-Session-ID": session})
        posted.raise_for_status()
    return {"session": session, "word": task.data.word, "content": content, "usage": usage, "done": done,
            "reward": reward}


async def main(base_url: str, num_tasks: int) -> None:
    """Every task concurrently; one JSON line each."""
    client = EvalClient(EvalClientConfig(base_url=base_url, api_key_var="VERLOG_NO_KEY"))
    tasks = EchoTaskset(EchoConfig(num_tasks=num_tasks)).load()
    try:
        for result in await asyncio.gather(*(run_task(client, t, base_url) for t in tasks)):
            print(json.dumps(result))
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
