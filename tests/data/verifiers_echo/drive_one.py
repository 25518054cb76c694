"""Play one echo task against a Verlog proxy URL with verifiers' own eval client (run it with the
verifiers virtualenv's python): the prompt is streamed through ``EvalClient.relay``, the reply is
scored by the task's ``@vf.reward`` and the reward is posted to the given reward URL.

Usage: ``python drive_one.py BASE_URL REWARD_URL TASK_INDEX TEMPERATURE MAX_TOKENS`` (BASE_URL ends in
``/v1``); prints one JSON line: word, content, reward.
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

from drive_proxy import read_events
from verlog_echo.taskset import EchoConfig, EchoTaskset


async def main(base_url: str, reward_url: str, index: int, temperature: float, max_tokens: int) -> None:
    """Stream task ``index``'s prompt, score the reply, post the reward."""
    client = EvalClient(EvalClientConfig(base_url=base_url, api_key_var="VERLOG_NO_KEY"))
    task = EchoTaskset(EchoConfig(num_tasks=index + 1)).load()[index]
    body = {"model": "verlog", "messages": [{"role": "user", "content": task.data.prompt}],
            "max_tokens": max_tokens, "temperature": temperature, "stream": True,
            "stream_options": {"include_usage": True}}
    try:
        reply = await client.relay(ChatDialect(), body, session_id=uuid.uuid4().hex)
        try:
            raw = b"".join([chunk async for chunk in reply.chunks])
        finally:
            await reply.close()
    finally:
        await client.close()
    content, _, _ = read_events(raw)
    reward = await task.echoed(SimpleNamespace(last_reply=content))
    async with httpx.AsyncClient() as http:
        (await http.post(reward_url, json={"reward": reward})).raise_for_status()
    print(json.dumps({"word": task.data.word, "content": content, "reward": reward}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])))
