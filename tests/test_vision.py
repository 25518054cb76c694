"""Vision-language agents: BabyAI's image observations, the tiny Qwen2.5-VL model and its critic, the
vision memory, images through the HF engine and scoring, freezing the vision tower, LoRA on the
language model only, and two PPO iterations of the ``tiny_vl`` recipe through the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from helpers import small_corpus, train_cli
from verlog.envs import make_env
from verlog.envs.base import invalid_action_notice, observation_image, observation_text
from verlog.envs.vector import make_vector_env
from verlog.memory import PromptStats, VisionMemory
from verlog.vision import IMAGE_PAD, VISION_END, VISION_START, VisionInput, image_input, load_image_processor

TILE = 8
SIDE = 7 * TILE


@pytest.fixture(scope="module")
def tiny_vl(tmp_path_factory):
    """The tiny vision-language model directory, built once (read-only for the tests)."""
    from verlog.tiny_model import build_tiny_vl_model

    return build_tiny_vl_model(tmp_path_factory.mktemp("tiny_vl") / "model", small_corpus())


@pytest.fixture(scope="module")
def tokenizer(tiny_vl):
    from verlog.models import load_tokenizer

    return load_tokenizer(tiny_vl)


# ---------------------------------------------------------------- environment
@pytest.mark.parametrize("mode", ["image", "both"])
def test_image_modes_pass_gymnasiums_env_checker(mode):
    env = make_env("babyai/easy_goto", observation_mode=mode, image_tile_px=TILE)
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    assert obs["image"].shape == (SIDE, SIDE, 3) and obs["image"].dtype == np.uint8


def test_text_mode_is_unchanged_and_image_mode_text_is_the_mission():
    text_env = make_env("babyai/goto")
    image_env = make_env("babyai/goto", observation_mode="image")
    both_env = make_env("babyai/goto", observation_mode="both")
    replies = ["ACTION: turn left", "nonsense", "ACTION: go forward"]
    t_obs, _ = text_env.reset(seed=11)
    i_obs, _ = image_env.reset(seed=11)
    b_obs, _ = both_env.reset(seed=11)
    assert isinstance(t_obs, str)
    assert i_obs["text"] == text_env.mission and "wall" not in i_obs["text"]  # no object list
    assert b_obs["text"] == t_obs and np.array_equal(b_obs["image"], i_obs["image"])
    for reply in replies:
        t_obs = text_env.step(reply)[0]
        i_obs = image_env.step(reply)[0]
        b_obs = both_env.step(reply)[0]
        assert b_obs["text"] == t_obs
        if reply == "nonsense":  # the invalid-reply notice comes first in every mode
            assert i_obs["text"] == invalid_action_notice("go forward") + "\n" + image_env.mission
            assert t_obs.startswith(invalid_action_notice("go forward") + "\n")
        else:
            assert i_obs["text"] == image_env.mission


def test_the_image_shows_the_view_and_changes_when_the_agent_turns():
    env = make_env("babyai/easy_goto", observation_mode="image", image_tile_px=TILE)
    first = env.reset(seed=0)[0]["image"]
    turned = env.step("ACTION: turn left")[0]["image"]
    assert not np.array_equal(first, turned)
    # the agent is drawn (a red triangle) at the bottom centre of its own view, nowhere else
    red = first[..., 0].astype(int) - first[..., 1] > 100
    cell = np.zeros_like(red)
    cell[SIDE - TILE:, 3 * TILE:4 * TILE] = True
    assert red[cell].any()
    ball = make_env("babyai/easy_goto", observation_mode="image", image_tile_px=TILE)
    assert all(np.array_equal(ball.reset(seed=0)[0]["image"], first) for _ in range(2))  # deterministic


@pytest.mark.parametrize("mode", ["image", "both"])
def test_sokoban_image_modes_show_the_whole_room(mode):
    from verlog.envs.sokoban.game import CELL_COLOURS

    env = make_env("sokoban/6x6_1box", observation_mode=mode, image_tile_px=TILE)
    check_env(env, skip_render_check=True)
    text_env = make_env("sokoban/6x6_1box")
    obs, _ = env.reset(seed=2)
    text, _ = text_env.reset(seed=2)
    assert obs["image"].shape == (6 * TILE, 6 * TILE, 3)
    assert obs["text"] == (text if mode == "both" else "Boxes on targets: 0 of 1.")
    r, c = env.state.player  # the player's square sits in the middle of its cell
    assert tuple(obs["image"][r * TILE + TILE // 2, c * TILE + TILE // 2]) == CELL_COLOURS["player"]
    (br, bc), = env.state.boxes
    assert tuple(obs["image"][br * TILE + TILE // 2, bc * TILE + TILE // 2]) == CELL_COLOURS["box"]
    assert tuple(obs["image"][0, 3]) == (0, 0, 0) and tuple(obs["image"][2, 2]) == CELL_COLOURS["wall"]  # grid, wall
    after = env.step(f"ACTION: {env.room.solution[0]}")[0]
    assert not np.array_equal(after["image"], obs["image"])


def test_vector_env_unbatches_image_observations():
    from verlog.rollout.records import CollectStats
    from verlog.rollout.runner import vector_reset, vector_step

    venv = make_vector_env("babyai/easy_goto", 2, seed=5, mode="sync",
                           env_kwargs={"observation_mode": "image", "image_tile_px": TILE})
    try:
        stats = CollectStats()
        starts = vector_reset(venv, 5, stats)
        assert [observation_text(o) for o, _ in starts] == ["go to the red ball"] * 2
        steps = vector_step(venv, [0, 1], ["ACTION: turn left", "ACTION: go forward"], stats)
        assert all(observation_image(s.observation).shape == (SIDE, SIDE, 3) for s in steps)
    finally:
        venv.close()


def test_bad_image_settings_are_refused():
    with pytest.raises(ValueError, match="observation_mode"):
        make_env("babyai/easy_goto", observation_mode="pixels")
    with pytest.raises(ValueError, match="image_tile_px"):
        make_env("babyai/easy_goto", observation_mode="image", image_tile_px=0)


# ---------------------------------------------------------------- the tiny VL model
def test_tiny_vl_model_reloads_with_the_same_outputs_and_is_deterministic(tiny_vl, tmp_path):
    from transformers import AutoModelForImageTextToText

    from verlog.models import load_actor
    from verlog.tiny_model import build_tiny_vl_model

    model = load_actor(tiny_vl)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    again = AutoModelForImageTextToText.from_pretrained(build_tiny_vl_model(tmp_path / "again", small_corpus()))
    for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name
    other = load_actor(build_tiny_vl_model(tmp_path / "seed1", small_corpus(), seed=1))
    assert not torch.equal(other.lm_head.weight, model.lm_head.weight)
    ids, vision = _prompt(tiny_vl, seed=0)
    with torch.no_grad():
        a = model(input_ids=ids, pixel_values=vision.pixel_values, image_grid_thw=vision.image_grid_thw).logits
        b = again(input_ids=ids, pixel_values=vision.pixel_values, image_grid_thw=vision.image_grid_thw).logits
    assert torch.equal(a, b)
    assert build_tiny_vl_model(tiny_vl, small_corpus()) == tiny_vl  # same manifest: reused as is


def test_tiny_vl_tokenizer_and_processor(tokenizer, tiny_vl):
    ids = [tokenizer.convert_tokens_to_ids(t) for t in (VISION_START, VISION_END, IMAGE_PAD)]
    assert all(i >= 4 for i in ids) and len(set(ids)) == 3
    assert tokenizer.decode(ids, skip_special_tokens=True) == ""
    processor = load_image_processor(str(tiny_vl))
    vision = image_input(processor, np.zeros((SIDE, SIDE, 3), np.uint8))
    assert vision.image_grid_thw.tolist() == [[1, 14, 14]] and vision.token_counts(2) == [49]
    assert vision.pixel_values.shape == (196, 3 * 2 * 4 * 4)


def test_vision_critic_loads_from_the_actor_and_from_its_own_save(tiny_vl, tmp_path):
    from verlog.models import is_critic_dir, load_critic

    critic = load_critic(tiny_vl, value_head_init_std=0.1)
    assert type(critic).__name__ == "Qwen2_5_VLForTokenClassification"
    ids, vision = _prompt(tiny_vl, seed=1)
    with torch.no_grad():
        values = critic(input_ids=ids, pixel_values=vision.pixel_values, image_grid_thw=vision.image_grid_thw).logits
    assert values.shape == (1, ids.shape[1], 1)
    critic.save_pretrained(tmp_path / "critic")
    assert is_critic_dir(tmp_path / "critic")
    again = load_critic(tmp_path / "critic")
    with torch.no_grad():
        same = again(input_ids=ids, pixel_values=vision.pixel_values, image_grid_thw=vision.image_grid_thw).logits
    assert torch.equal(values, same)


# ---------------------------------------------------------------- memory
def _obs(seed: int, text: str | None = None) -> dict:
    env = make_env("babyai/easy_goto", observation_mode="image", image_tile_px=TILE)
    obs, _ = env.reset(seed=seed)
    return {"text": text or obs["text"], "image": obs["image"]}


def _memory(tiny_vl, tokenizer, **kwargs) -> VisionMemory:
    return VisionMemory(tokenizer, load_image_processor(str(tiny_vl)), **kwargs)


def test_vision_memory_expands_placeholders_and_carries_pixels(tiny_vl, tokenizer):
    memory = _memory(tiny_vl, tokenizer, history_turns=0)
    memory.start_episode("Your goal is to go to the red ball.", _obs(0))
    ids, stats = memory.prompt_ids()
    vision = memory.prompt_images()
    pad = tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    assert ids.count(pad) == 49 and vision.num_images == 1
    start = ids.index(tokenizer.convert_tokens_to_ids(VISION_START))
    assert ids[start + 1:start + 50] == [pad] * 49 and ids[start + 50] == tokenizer.convert_tokens_to_ids(VISION_END)
    assert stats == PromptStats(len(ids), 0, 0, 0)
    assert "go to the red ball" in tokenizer.decode(ids)


def test_vision_memory_keeps_the_last_k_images_and_counts_the_dropped(tiny_vl, tokenizer):
    memory = _memory(tiny_vl, tokenizer, history_turns=3, max_images=2, max_prompt_tokens=4096)
    memory.start_episode("sys", _obs(0, "first"))
    for k, seed in enumerate((1, 2, 3)):
        memory.add_turn(f"ACTION: turn left {k}", _obs(seed, f"obs{k}"))
    ids, stats = memory.prompt_ids()
    vision = memory.prompt_images()
    assert vision.num_images == 2 and stats.dropped_images == 2  # 4 stored, the newest 2 shown
    text = tokenizer.decode(ids)
    # the images shown are those of the last past turn (obs1) and of the current observation (obs2),
    # each before its text
    assert text.index("obs0") < text.index(VISION_START) < text.index("obs1") and text.count(VISION_START) == 2
    want = torch.cat([image_input(memory.image_processor, _obs(s)["image"]).pixel_values for s in (2, 3)])
    assert torch.equal(vision.pixel_values, want)
    assert stats.trimmed_turns == 0


def test_vision_memory_budget_drops_old_turns_then_the_image(tiny_vl, tokenizer):
    memory = _memory(tiny_vl, tokenizer, history_turns=2, max_images=3, max_prompt_tokens=4096)
    memory.start_episode("sys", _obs(0))
    memory.add_turn("ACTION: turn left", _obs(1))
    memory.add_turn("ACTION: turn right", _obs(2))
    full, _ = memory.prompt_ids()
    one_image = _memory(tiny_vl, tokenizer, history_turns=0)
    one_image.start_episode("sys", _obs(2))
    alone = len(one_image.prompt_ids()[0])
    tight = _memory(tiny_vl, tokenizer, history_turns=2, max_images=3, max_prompt_tokens=alone)
    tight.load_state_dict({**memory.state_dict(), "max_prompt_tokens": alone})
    ids, stats = tight.prompt_ids()
    assert len(ids) <= alone < len(full)
    assert stats.trimmed_turns == 2 and stats.dropped_images == 2 and tight.prompt_images().num_images == 1
    tiny_budget = _memory(tiny_vl, tokenizer, history_turns=0, max_prompt_tokens=alone - 10)
    tiny_budget.start_episode("sys", _obs(2))
    ids, stats = tiny_budget.prompt_ids()
    assert tiny_budget.prompt_images() is None and stats.dropped_images == 1 and len(ids) <= alone - 10


def test_vision_memory_state_round_trip_gives_the_same_prompt(tiny_vl, tokenizer):
    memory = _memory(tiny_vl, tokenizer, history_turns=1, max_images=2)
    memory.start_episode("sys", _obs(4))
    memory.add_turn("ACTION: go forward", _obs(5))
    state = json.loads(json.dumps(memory.state_dict()))
    other = _memory(tiny_vl, tokenizer, history_turns=1, max_images=2)
    other.load_state_dict(state)
    assert other.prompt_ids() == memory.prompt_ids()
    assert torch.equal(other.prompt_images().pixel_values, memory.prompt_images().pixel_values)
    with pytest.raises(ValueError, match="max_images"):
        _memory(tiny_vl, tokenizer, history_turns=1, max_images=1).load_state_dict(state)


def test_vision_memory_takes_text_observations_as_turns_without_image(tiny_vl, tokenizer):
    memory = _memory(tiny_vl, tokenizer, history_turns=1)
    memory.start_episode("sys", "a text observation")
    assert memory.prompt_images() is None and memory.prompt_ids()[1].dropped_images == 0


# ---------------------------------------------------------------- engine, scoring
def _prompt(tiny_vl, seed: int) -> tuple[torch.Tensor, VisionInput]:
    from verlog.models import load_tokenizer

    memory = _memory(tiny_vl, load_tokenizer(tiny_vl), history_turns=0)
    memory.start_episode("sys", _obs(seed))
    return torch.tensor([memory.prompt_ids()[0]]), memory.prompt_images()


def test_engine_generates_from_images_and_scoring_reproduces_its_logprobs(tiny_vl, tokenizer):
    from verlog.models import load_actor, load_critic
    from verlog.rollout.engine import SamplingParams
    from verlog.rollout.hf import HFEngine
    from verlog.scoring import critic_outputs, pack_pairs, policy_outputs

    model = load_actor(tiny_vl)
    engine = HFEngine(model, tokenizer, seed=0)
    prompts, images = [], []
    for seed, history in ((0, 0), (1, 1), (2, 0)):  # prompts of different lengths, one without image
        memory = _memory(tiny_vl, tokenizer, history_turns=history)
        memory.start_episode("sys", _obs(seed))
        if history:
            memory.add_turn("ACTION: turn left", _obs(seed + 10))
        prompts.append(memory.prompt_ids()[0])
        images.append(memory.prompt_images())
    prompts[2], images[2] = tokenizer.encode("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"), None
    gens = engine.generate(prompts, SamplingParams(max_tokens=8, seed=1), images=images)
    pad = tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    assert all(pad not in g.token_ids for g in gens)
    rows = pack_pairs(prompts, [g.token_ids for g in gens], tokenizer.pad_token_id)
    rows.images = images
    logprobs, _ = policy_outputs(model, rows)
    for i, g in enumerate(gens):
        assert torch.allclose(logprobs[i, :len(g.token_ids)], torch.tensor(g.logprobs), atol=1e-4)
    # the images matter: without them (placeholders kept as plain tokens) the logprobs differ
    no_image = pack_pairs(prompts[:1], [gens[0].token_ids], tokenizer.pad_token_id)
    no_image.input_ids[no_image.input_ids == pad] = tokenizer.pad_token_id
    assert not torch.allclose(policy_outputs(model, no_image)[0][0], logprobs[0], atol=1e-3)
    values = critic_outputs(load_critic(tiny_vl, value_head_init_std=0.1), rows)
    assert values.shape == rows.response_ids.shape and torch.isfinite(values).all()


def test_turn_batch_keeps_images_through_save_and_rows(tiny_vl, tmp_path):
    from verlog.batch import ScoredBatch, TurnBatch
    from verlog.scoring import turn_rows

    _, vision = _prompt(tiny_vl, 0)
    batch = TurnBatch.from_turns([[[1, 2], [3]], [[4], [5, 6]]], [[[7], [8]], [[9], [10]]],
                                 [[[0.0], [0.0]], [[0.0], [0.0]]], [[0.0, 0.0], [0.0, 0.0]],
                                 [[False, False], [False, False]], [[False, False], [False, False]],
                                 [[0, 1], [0, 1]], [[True, True], [True, True]], [[False, False], [False, False]],
                                 {(1, 0): [11]}, pad_id=0, max_response_tokens=1, images={(1, 0): vision},
                                 bootstrap_images={(1, 0): vision})
    rows = turn_rows(batch)
    assert [v is not None for v in rows.images] == [False, False, True, False]
    ScoredBatch(batch).save(tmp_path / "b.pt")
    loaded = ScoredBatch.load(tmp_path / "b.pt").batch
    assert set(loaded.images) == {(1, 0)} and torch.equal(loaded.images[(1, 0)].pixel_values, vision.pixel_values)
    assert set(loaded.bootstrap_images) == {(1, 0)}


# ---------------------------------------------------------------- training models
def _cfg(**model):
    from verlog.config import TrainConfig

    cfg = TrainConfig()
    for key, value in model.items():
        setattr(cfg.model, key, value)
    return cfg


def test_freeze_vision_and_lora_on_the_language_model_only(tiny_vl):
    from verlog.models import load_actor
    from verlog.training_models import _prepared

    frozen = _prepared(load_actor(tiny_vl), _cfg(freeze_vision=True), tiny_vl, critic=False)
    assert not any(p.requires_grad for n, p in frozen.named_parameters() if ".visual." in n)
    assert all(p.requires_grad for n, p in frozen.named_parameters() if ".visual." not in n)
    lora = _prepared(load_actor(tiny_vl), _cfg(lora_rank=4, freeze_vision=True), tiny_vl, critic=False)
    adapted = [n for n, _ in lora.named_parameters() if "lora_A" in n]
    assert adapted and all("language_model.layers" in n for n in adapted)
    assert not any(p.requires_grad for n, p in lora.named_parameters() if ".visual." in n)
    # the merged weights load into a rollout engine under the base model's names (the weight sync)
    from verlog.lora import merged_named_parameters
    from verlog.rollout.hf import HFEngine

    with torch.no_grad():
        next(p for n, p in lora.named_parameters() if "lora_B" in n).fill_(0.5)
    engine = HFEngine(load_actor(tiny_vl), load_tokenizer_of(tiny_vl))
    engine.load_weights(merged_named_parameters(lora))
    name = adapted[0].replace("base_model.model.", "").replace(".lora_A.default.weight", ".weight")
    synced, base = dict(engine.model.named_parameters())[name], dict(load_actor(tiny_vl).named_parameters())[name]
    assert not torch.equal(synced, base)


def load_tokenizer_of(path):
    from verlog.models import load_tokenizer

    return load_tokenizer(path)


def test_config_rules_tie_image_modes_to_the_vision_memory():
    from verlog.config_validate import first_problem

    cfg = _cfg()
    cfg.env.observation_mode = "image"
    assert first_problem(cfg).startswith("env.observation_mode:")
    cfg.memory.type = "vision"
    assert first_problem(cfg) is None
    cfg.env.task = "crafter/default"
    assert first_problem(cfg).startswith("env.observation_mode:")
    cfg.env.task = "babyai/easy_goto"
    cfg.rollout.engine = "vllm"
    assert first_problem(cfg).startswith("rollout.engine:")
    cfg.rollout.engine = "hf"
    cfg.env.observation_mode = "text"
    assert first_problem(cfg).startswith("memory.type:")


# ---------------------------------------------------------------- two PPO iterations
SMALL = ["iterations=2", "ppo.critic_warmup_iterations=0", "format_warmup.steps=5", "format_warmup.episodes=2",
         "env.num_envs=4", "env.vector_mode=sync",
         "rollout.turns_per_env=4", "ppo.minibatches=2", "ppo.micro_batch_size=4", "model.tiny.corpus_episodes=4",
         "eval.episodes=2", "eval.num_envs=2", "env.max_steps=8", "logging.progress=false", "eval.baseline=false",
         "logging.dump_batch_every=1"]


def test_two_ppo_iterations_of_the_tiny_vl_recipe(tmp_path):
    from safetensors.torch import load_file

    from verlog.batch import ScoredBatch
    from verlog.logging import read_metrics

    train_cli("recipes/tiny_vl.yaml", *SMALL, f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}",
              "name=vl", timeout=300)
    run = tmp_path / "vl"
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["phase"] for r in rows] == ["ppo", "ppo"]
    for r in rows:
        assert r["rollout/behaviour_vs_old_logprob_max_abs"] < 1e-3  # engine and trainer saw the same images
        assert r["prompt/dropped_images"] == 0 and "actor/pg_loss" in r and "critic/value_loss" in r
    batch = ScoredBatch.load(run / "batches" / "iter_000002.pt").batch
    assert len(batch.images) == 16 and batch.bootstrap_images  # every turn's prompt had its image
    ckpt = run / "checkpoints" / "iter_000002"
    assert (ckpt / "actor" / "preprocessor_config.json").is_file()
    before = load_file(str(run / "format_warmup" / "model.safetensors"))
    assert (run / "format_warmup" / "preprocessor_config.json").is_file()
    after = load_file(str(ckpt / "actor" / "model.safetensors"))
    visual = [k for k in before if k.startswith("visual.")]
    assert visual and any(not torch.equal(before[k], after[k]) for k in visual)  # the vision tower trained
    assert json.loads((run / "eval.json").read_text())["episodes"] == 2


def test_group_collector_keeps_every_turns_images_and_joined_rounds_keep_theirs(tiny_vl, tokenizer):
    from verlog.batch import TurnBatch
    from verlog.models import load_actor
    from verlog.rollout.engine import SamplingParams
    from verlog.rollout.episodes import EpisodeCollector
    from verlog.rollout.hf import HFEngine
    from verlog.scoring import policy_outputs, turn_rows

    model = load_actor(tiny_vl)
    venv = make_vector_env("babyai/easy_goto", 2, seed=0, mode="sync",
                           env_kwargs={"observation_mode": "image", "image_tile_px": TILE, "max_steps": 3,
                                       "instruction_style": "brief"})
    memories = [_memory(tiny_vl, tokenizer, history_turns=0) for _ in range(2)]
    collector = EpisodeCollector(venv, memories, HFEngine(model, tokenizer), lambda ids: tokenizer.batch_decode(
        ids, skip_special_tokens=True), SamplingParams(max_tokens=4, seed=0), tokenizer.pad_token_id, seed=0,
        group_size=2)
    try:
        first, _ = collector.collect()
        second, _ = collector.collect()
    finally:
        collector.close()
    real = {(t, n) for t, n in first.turns.nonzero().tolist()}
    assert set(first.images) == real  # one image per real turn, none on padding turns
    joined = TurnBatch.concat_envs([first, second])
    assert set(joined.images) == real | {(t, n + 2) for t, n in second.turns.nonzero().tolist()}
    rows = turn_rows(joined)
    assert all(v is not None for v in rows.images)
    logprobs, _ = policy_outputs(model, rows)
    assert torch.isfinite(logprobs).all()
