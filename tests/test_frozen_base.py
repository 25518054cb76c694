"""model.cache_frozen_activations: the frozen layers' output computed once, the top layers run from it."""

from types import SimpleNamespace

import pytest
import torch

from conftest import TINY3_LAYERS
from verlog import distributed as D
from verlog import frozen_base
from verlog.config import ConfigError, load_recipe
from verlog.config_validate import first_problem
from verlog.preflight import check_trainable_layers
from verlog.scoring import critic_outputs, pack_pairs, policy_outputs, with_frozen_hidden
from verlog.training_models import build_training_models

torch.set_num_threads(1)
LAYERS = TINY3_LAYERS


def _cfg(k, *more):
    over = ["ppo.micro_batch_size=2", "model.value_head_init_std=0.5", "ppo.minibatches=1", "ppo.critic_lr=0.01",
            "ppo.actor_lr=0.01", f"model.tiny.num_layers={LAYERS}", "model.cache_frozen_activations=true"]
    return load_recipe("tiny", over + ([f"model.trainable_layers={k}"] if k is not None else []) + list(more))


def _models(path, k, *more, critic_path=None):
    D.init_distributed()
    torch.manual_seed(0)
    return build_training_models(_cfg(k, *more), actor_path=path, critic_path=critic_path or path,
                                 initial_path=path, needs_critic=True, turns_per_batch=3)


def _rows():
    # three rows of different lengths: right padding and the response window differ per row
    return pack_pairs([[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16, 17]], [[20, 21], [22, 23, 24], [25]], pad_id=0)


@pytest.mark.parametrize("k", [1, 0, LAYERS])
def test_outputs_from_the_frozen_hidden_states_equal_the_whole_forward(tiny3, k):
    models = _models(tiny3, k)
    rows = _rows()
    cached = with_frozen_hidden(models.actor, rows, micro_batch_size=2)
    assert cached.hidden_split == LAYERS - k and cached.hidden.shape == (*rows.input_ids.shape, 32)
    m = rows.response_mask
    with torch.no_grad():
        for whole, split in ((policy_outputs(models.actor, rows)[0], policy_outputs(models.actor, cached)[0]),
                             (critic_outputs(models.critic, rows), critic_outputs(models.critic, cached))):
            assert torch.allclose(whole[m], split[m], atol=1e-5), (whole, split)
    # a selection (what the update's micro-batches take) slices the hidden states with the rows
    part = cached.select(torch.tensor([1]))
    assert part.hidden.shape == (1, part.input_ids.shape[1], 32)
    with torch.no_grad():
        assert torch.allclose(policy_outputs(models.actor, part)[0][part.response_mask],
                              policy_outputs(models.actor, rows.select(torch.tensor([1])))[0][part.response_mask],
                              atol=1e-5)


def test_the_frozen_layers_do_not_run_when_the_hidden_states_are_given(tiny3):
    models = _models(tiny3, 1)
    calls = []
    for i, layer in enumerate(frozen_base.decoder_layers(models.actor)):
        layer.register_forward_hook(lambda *_, i=i: calls.append(i))
    cached = with_frozen_hidden(models.actor, _rows(), micro_batch_size=3)
    assert calls == [0, 1]
    calls.clear()
    policy_outputs(models.actor, cached)
    critic_outputs(models.critic, cached)
    assert calls == [2]  # the critic's layer 2 is its own module: only the actor's top layer is hooked
    assert len(frozen_base.decoder_layers(models.actor)) == LAYERS  # the layer list is restored


def _plain_models(path, lora):
    """The actor and critic as plain transformers models (DeepSpeed keeps gradients in its own buffers)."""
    from verlog.lora import add_lora
    from verlog.models import load_actor, load_critic
    from verlog.training_models import train_top_layers

    torch.manual_seed(0)
    models = []
    for critic in (False, True):
        model = load_critic(path, value_head_init_std=0.5) if critic else load_actor(path)
        if lora:
            model = add_lora(model, rank=2, alpha=4.0, dropout=0.0, target_modules=["q_proj", "v_proj", "down_proj"],
                             base_path=path, critic=critic, modules_to_save=[], layers_to_transform=[LAYERS - 1])
        train_top_layers(model, 1)
        models.append(model.train())
    return models


@pytest.mark.parametrize("lora", [False, True])
def test_gradients_from_the_frozen_hidden_states_equal_the_whole_backward(tiny3, lora):
    grads = []
    for use_cache in (False, True):
        actor, critic = _plain_models(tiny3, lora)
        rows = _rows()
        if use_cache:
            rows = with_frozen_hidden(actor, rows, micro_batch_size=2)
        m = rows.response_mask
        loss = -policy_outputs(actor, rows)[0][m].mean() + critic_outputs(critic, rows)[m].pow(2).mean()
        loss.backward()
        grads.append({f"{i}.{n}": p.grad.clone() for i, model in enumerate((actor, critic))
                      for n, p in model.named_parameters() if p.requires_grad})
    whole, split = grads
    assert whole.keys() == split.keys() and whole
    assert all(g.abs().sum() > 0 for n, g in whole.items() if "lora_A" not in n)  # lora_B starts at zero
    for n in whole:
        assert torch.allclose(whole[n], split[n], atol=1e-6), n


def test_a_critic_with_other_frozen_layers_runs_whole(tiny3, tmp_path):
    from transformers import AutoModelForCausalLM

    other = AutoModelForCausalLM.from_pretrained(tiny3)
    with torch.no_grad():
        other.model.layers[0].mlp.down_proj.weight.add_(0.1)
    other.save_pretrained(tmp_path / "other")
    models = _models(tiny3, 1, critic_path=tmp_path / "other")
    assert frozen_base.frozen_below(models.actor) == 2 and frozen_base.frozen_below(models.critic) is None
    assert frozen_base.same_frozen_base(models.actor, models.actor)
    rows = _rows()
    cached = with_frozen_hidden(models.actor, rows, micro_batch_size=2)
    m = rows.response_mask
    with torch.no_grad():
        assert torch.equal(critic_outputs(models.critic, cached)[m], critic_outputs(models.critic, rows)[m])


def test_a_model_without_a_frozen_base_ignores_the_hidden_states(tiny3):
    from transformers import AutoModelForCausalLM

    models = _models(tiny3, 1)
    reference = AutoModelForCausalLM.from_pretrained(tiny3).eval()  # a whole model, like the KL reference
    rows = _rows()
    cached = with_frozen_hidden(models.actor, rows, micro_batch_size=2)
    with torch.no_grad():
        assert torch.equal(policy_outputs(reference, cached)[0], policy_outputs(reference, rows)[0])
    with pytest.raises(ValueError, match="no frozen base"):
        frozen_base.frozen_hidden(reference, rows.input_ids, rows.attention_mask)


@pytest.mark.parametrize("lora", [False, True])
def test_the_kl_reference_runs_its_top_layers_on_the_shared_hidden_states(tiny3, lora):
    models = _models(tiny3, 1, "ppo.kl_coef=0.1", *(["model.lora_rank=2"] if lora else []))
    rows = _rows()
    cached = with_frozen_hidden(models.actor, rows, micro_batch_size=2)
    calls = []
    if not lora:  # the separate frozen initial policy: hook its layers through the closure's model
        ref_model = models.reference.__closure__[0].cell_contents
        assert frozen_base.frozen_below(ref_model) == LAYERS - 1
        for i, layer in enumerate(frozen_base.decoder_layers(ref_model)):
            layer.register_forward_hook(lambda *_, i=i: calls.append(i))
    m = rows.response_mask
    with torch.no_grad():
        split = models.reference(cached, 0.7)  # at a temperature, as scoring takes it
        assert calls == ([] if lora else [LAYERS - 1])
        assert torch.allclose(split[m], models.reference(rows, 0.7)[m], atol=1e-5)


def test_unsplittable_models_are_refused():
    with pytest.raises(ValueError, match=r"^model.cache_frozen_activations: model type 'gemma'"):
        frozen_base.check_splittable(SimpleNamespace(config=SimpleNamespace(model_type="gemma")))
    mixed = SimpleNamespace(model_type="qwen2", layer_types=["full_attention", "sliding_attention"])
    with pytest.raises(ValueError, match=r"^model.cache_frozen_activations: the model's layers use different"):
        frozen_base.check_splittable(SimpleNamespace(config=mixed))


def test_config_rules_name_the_key():
    with pytest.raises(ConfigError, match=r"^model.cache_frozen_activations: needs model.trainable_layers"):
        check_trainable_layers(_cfg(None))
    check_trainable_layers(_cfg(1))
    with pytest.raises(ConfigError, match=r"^model.cache_frozen_activations: not with ppo.gradient_checkpointing"):
        _cfg(1, "ppo.gradient_checkpointing=true")
    with pytest.raises(ConfigError, match=r"^model.cache_frozen_activations: needs deepspeed.zero_stage 0-2"):
        _cfg(1, "deepspeed.zero_stage=3")
    assert first_problem(_cfg(1)) is None
