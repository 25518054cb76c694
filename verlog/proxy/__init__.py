"""An OpenAI-compatible proxy in front of a rollout engine: agents written against the OpenAI API
call ``/rollout/{id}/attempt/{n}/v1/chat/completions``; every call's exact prompt and response ids are
recorded per (rollout, attempt) and turned into turn samples for training. Clients with one base URL for
every episode call ``/v1/chat/completions`` with an ``X-Session-ID`` header instead; ``"stream": true``
is answered with server-sent events."""

from verlog.proxy.adapter import CREDIT_MODES, proxy_batch_inputs, rollout_samples
from verlog.proxy.app import SESSION_HEADER, OpenAIProxy, Turn, TurnStream, create_app
from verlog.proxy.gate import PauseGate
from verlog.proxy.openai_format import ProxyRequestError
from verlog.proxy.recorder import CallRecord, ProxyRecorder, RolloutRecord
from verlog.proxy.server import ProxyServer
from verlog.proxy.worker import GenerationWorker

__all__ = [
    "CREDIT_MODES", "SESSION_HEADER", "CallRecord", "GenerationWorker", "OpenAIProxy", "PauseGate", "ProxyRecorder",
    "ProxyRequestError", "ProxyServer", "RolloutRecord", "Turn", "TurnStream", "create_app", "proxy_batch_inputs",
    "rollout_samples",
]
