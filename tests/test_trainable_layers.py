"""model.trainable_layers: only the top k transformer layers (+ final norm, + value head) train."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from conftest import TINY3_LAYERS
from verlog import distributed as D
from verlog.config import ConfigError, load_recipe
from verlog.preflight import check_trainable_layers
from verlog.scoring import critic_outputs, pack_pairs, policy_outputs
from verlog.frozen_base import decoder_layers
from verlog.training_models import build_training_models, train_top_layers

torch.set_num_threads(1)
LAYERS = TINY3_LAYERS


def _cfg(k, *more):
    over = ["ppo.micro_batch_size=2", "model.value_head_init_std=0.5", "ppo.minibatches=1", "ppo.critic_lr=0.01", "ppo.actor_lr=0.01",
            f"model.tiny.num_layers={LAYERS}"] + ([f"model.trainable_layers={k}"] if k is not None else [])
    return load_recipe("tiny", over + list(more))


def _models(path, k, *more):
    D.init_distributed()
    torch.manual_seed(0)
    return build_training_models(_cfg(k, *more), actor_path=path, critic_path=path, initial_path=path,
                                 needs_critic=True, turns_per_batch=2)


def _rows():
    return pack_pairs([[5, 6, 7, 8], [9, 10, 11]], [[20, 21], [22, 23, 24]], pad_id=0)


def _kept_names(k, critic):
    top = tuple(f"model.layers.{i}." for i in range(LAYERS - k, LAYERS))
    return lambda name: name.startswith(top) or name.startswith("model.norm.") or (critic and name.startswith("score."))


def _zero2_params(engine):
    """The parameters DeepSpeed's ZeRO optimizer steps (its fp16/bf16 groups: the model's own tensors)."""
    return [p for group in engine.optimizer.bit16_groups for p in group]


def _one_step(models):
    rows = _rows()
    m = rows.response_mask
    for engine, loss_of in ((models.actor, lambda e: -policy_outputs(e, rows)[0][m].mean()),
                            (models.critic, lambda e: (critic_outputs(e, rows)[m] - 1.0).pow(2).mean())):
        engine.train()
        engine.backward(loss_of(engine))
        engine.step()


@pytest.mark.parametrize("k", [1, 0])
def test_only_the_top_layers_change_and_the_optimizer_holds_only_them(tiny3, k):
    models = _models(tiny3, k)
    before = {name: {n: p.detach().clone() for n, p in e.module.named_parameters()}
              for name, e in models.engines().items()}
    _one_step(models)
    for name, engine in models.engines().items():
        kept = _kept_names(k, critic=name == "critic")
        params = dict(engine.module.named_parameters())
        trainable = {n for n, p in params.items() if p.requires_grad}
        assert trainable == {n for n in params if kept(n)}, name
        assert {id(p) for p in _zero2_params(engine)} == {id(params[n]) for n in trainable}, name
        state = sum(t.numel() for t in engine.optimizer.single_partition_of_fp32_groups)  # padded for alignment
        n_trainable = sum(params[n].numel() for n in trainable)
        assert n_trainable <= state <= n_trainable + 32 < sum(p.numel() for p in params.values()), name
        for n, p in params.items():
            changed = not torch.equal(p.detach(), before[name][n])
            assert changed == (n in trainable), (name, n)


def test_all_layers_train_without_the_key(tiny3):
    models = _models(tiny3, None)
    for name, engine in models.engines().items():
        params = list(engine.module.parameters())
        assert all(p.requires_grad for p in params), name
        assert sum(p.numel() for p in _zero2_params(engine)) == sum(p.numel() for p in params), name
        assert all("forward" not in vars(layer) for layer in decoder_layers(engine.module)), name


def test_frozen_layers_record_no_graph_even_with_gradient_checkpointing(tiny3):
    models = _models(tiny3, 1, "ppo.gradient_checkpointing=true")
    layers = decoder_layers(models.actor.module)
    seen = {}
    for i, layer in enumerate(layers):
        layer.register_forward_hook(lambda mod, args, out, i=i: seen.__setitem__(i, (out[0] if isinstance(out, tuple)
                                                                                    else out).requires_grad))
    models.actor.train()
    policy_outputs(models.actor, _rows())
    assert seen == {0: False, 1: False, 2: True}
    _one_step(models)  # the top layer still learns through checkpointing


def test_lora_adapters_only_on_the_top_layers(tiny3):
    models = _models(tiny3, 1, "model.lora_rank=2", "model.lora_modules_to_save=[norm]")
    for name, engine in models.engines().items():
        trainable = [n for n, p in engine.module.named_parameters() if p.requires_grad]
        lora = [n for n, _ in engine.module.named_parameters() if "lora_" in n]
        assert lora and all(".layers.2." in n for n in lora), name
        assert all(".layers.0." not in n and ".layers.1." not in n for n in trainable), name
        assert any("lora_" in n for n in trainable), name


def test_frozen_model_checkpoint_loads_as_a_full_model(tiny3, tmp_path):
    models = _models(tiny3, 1)
    _one_step(models)
    actor = models.actor.module
    actor.save_pretrained(tmp_path, state_dict=dict(D.gathered_named_parameters(actor)))
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    actor.eval()
    rows = _rows()
    with torch.no_grad():
        assert torch.allclose(policy_outputs(loaded, rows)[0], policy_outputs(actor, rows)[0], atol=1e-6)


def test_train_top_layers_refuses_more_layers_than_the_model_has(tiny3):
    model = AutoModelForCausalLM.from_pretrained(tiny3)
    with pytest.raises(ValueError, match=r"model.trainable_layers: expected 0..3"):
        train_top_layers(model, 4)


def test_preflight_names_the_key():
    with pytest.raises(ConfigError, match=r"^model.trainable_layers: expected 0..3 .*got 4$"):
        check_trainable_layers(_cfg(4))
    with pytest.raises(ConfigError, match=r"^model.trainable_layers: expected 0..3 .*got -1$"):
        check_trainable_layers(_cfg(-1))
    check_trainable_layers(_cfg(3))
    check_trainable_layers(_cfg(None))


def test_format_warmup_trains_only_the_top_layers(tiny3, tmp_path):
    from verlog.builders import memory_factory, run_format_warmup
    from verlog.models import load_actor, load_tokenizer

    D.init_distributed()
    cfg = _cfg(1, "format_warmup.steps=2", "format_warmup.episodes=1", "format_warmup.batch_size=4",
               "format_warmup.lr=0.05")
    tokenizer = load_tokenizer(tiny3)
    run_format_warmup(cfg, tokenizer, memory_factory(cfg.memory, tokenizer), tiny3, tmp_path / "warm")
    before = dict(load_actor(tiny3).named_parameters())
    kept = _kept_names(1, critic=False)
    changed = {name for name, p in load_actor(tmp_path / "warm").named_parameters()
               if not torch.equal(p, before[name])}
    assert changed and all(kept(name) for name in changed)
    assert any(name.startswith(f"model.layers.{LAYERS - 1}.") for name in changed)


def test_resume_restores_the_trained_top_layers(tiny3, tmp_path):
    from verlog.training_models import build_training_models as build

    models = _models(tiny3, 1)
    _one_step(models)
    stepped = {name: {n: p.detach().clone() for n, p in e.module.named_parameters()}
               for name, e in models.engines().items()}
    for name, engine in models.engines().items():  # as a checkpoint saves them: frozen weights left out
        engine.save_checkpoint(str(tmp_path / "ds"), tag=name, exclude_frozen_parameters=True)
    torch.manual_seed(1)
    resumed = build(_cfg(1), actor_path=tiny3, critic_path=tiny3, initial_path=tiny3, needs_critic=True,
                    turns_per_batch=2, resume_from=tmp_path)
    for name, engine in resumed.engines().items():
        for n, p in engine.module.named_parameters():
            assert torch.equal(p, stepped[name][n]), (name, n)


def test_resume_steps_with_the_configured_learning_rate_not_the_saved_one(tiny3, tmp_path):
    # the checkpoint's optimizer state carries lr 0.01; a resume asking for 1e-6 must step with 1e-6
    models = _models(tiny3, None)
    _one_step(models)
    for name, engine in models.engines().items():
        engine.save_checkpoint(str(tmp_path / "ds"), tag=name)
    new_lr = {"actor": 1e-6, "critic": 2e-6}
    cfg = _cfg(None, f"ppo.actor_lr={new_lr['actor']}", f"ppo.critic_lr={new_lr['critic']}", "ppo.weight_decay=0.1")
    resumed = build_training_models(cfg, actor_path=tiny3, critic_path=tiny3, initial_path=tiny3, needs_critic=True,
                                    turns_per_batch=2, resume_from=tmp_path)
    before = {name: {n: p.detach().clone() for n, p in e.module.named_parameters()}
              for name, e in resumed.engines().items()}
    _one_step(resumed)
    for name, engine in resumed.engines().items():
        groups = engine.optimizer.param_groups
        assert [g["lr"] for g in groups] == [new_lr[name]] * len(groups), name
        assert [g["weight_decay"] for g in groups] == [0.1] * len(groups), name
        assert all(s["step"] == 2 for s in engine.optimizer.optimizer.state.values()), name  # Adam's state kept
        moved = max((p.detach() - before[name][n]).abs().max().item() for n, p in engine.module.named_parameters())
        assert 0 < moved < 1e-4, (name, moved)  # an Adam step of lr 0.01 moves weights by ~0.01


def test_preflight_reads_the_layer_count_of_a_packaged_model_without_converting_it(tmp_path):
    # the packaged GGUF's header says 30 layers; nothing is converted into the (empty) cache
    over = [f"model.cache_dir={tmp_path}", "model.path=smollm2-135m-instruct"]
    with pytest.raises(ConfigError, match=r"^model.trainable_layers: expected 0..30 \(the layers of smollm2-135m-instruct\), got 31$"):
        check_trainable_layers(load_recipe("smollm2_easy_goto", over + ["model.trainable_layers=31"]))
    check_trainable_layers(load_recipe("smollm2_easy_goto", over + ["model.trainable_layers=30",
                                                                     "model.cache_frozen_activations=true"]))
    assert not any(tmp_path.iterdir())
