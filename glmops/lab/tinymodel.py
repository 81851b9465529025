"""The lab model: a tiny random-weight Llama with its own byte-level BPE tokenizer and a
chat template, generated offline as a local checkpoint repo whose commit hash is fixed.

Standard library only (no torch, numpy or tokenizers on the controller): the weights are
seeded pseudo-random bf16 written in the safetensors format, the tokenizer is trained here
with a small deterministic BPE, and the files are committed to a git repo with a fixed
identity and fixed dates. The same bytes and so the same commit come out on every machine;
``TINY_LLAMA_COMMIT`` is that commit and ``ensure_tiny_model`` checks it.

Layout (``root`` defaults to ``~/.cache/glmops/models``)::

    <root>/glmops-lab/tiny-llama/        git work tree at the commit (.git inside)
        config.json generation_config.json model.safetensors tokenizer.json
        tokenizer_config.json special_tokens_map.json README.md

The work tree is the "directory per commit" the hub double serves (one commit, ``main``);
vLLM loads it as ``--model DIR``. Shape: hidden 128, 2 heads of head_dim 64 (vLLM-CPU
crashes with head_dim 16, FINDINGS.md), 2 layers, vocab 512, tied embeddings, bf16.
Usage: ``python -m glmops.lab.tinymodel build [--root DIR]``.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import random
import re
import shutil
import struct
import subprocess
from array import array
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import click

ORG = "glmops-lab"
NAME = "tiny-llama"
REPO_ID = f"{ORG}/{NAME}"
# The commit every build produces (asserted after each build and in tests/unit/test_tinymodel.py).
# Change it only together with a deliberate change of the generator.
TINY_LLAMA_COMMIT = "fe40d458d5998d162f66364ccee30bb27f5e658f"
SEED = 0
SPECIAL = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# Model shape. head_dim = hidden / heads = 64.
HIDDEN, HEADS, KV_HEADS, LAYERS, INTERMEDIATE, VOCAB = 128, 2, 2, 2, 256, 512
HEAD_DIM = HIDDEN // HEADS
GIT_ENV = {
    "GIT_AUTHOR_NAME": "glmops lab",
    "GIT_AUTHOR_EMAIL": "lab@glmops.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "glmops lab",
    "GIT_COMMITTER_EMAIL": "lab@glmops.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}
COMMIT_MESSAGE = "tiny-llama: random bf16 weights (seed 0), byte-level BPE tokenizer\n"


class TinyModelError(RuntimeError):
    """The lab model could not be built, or its commit is not the fixed one."""


# ---------------------------------------------------------------- tokenizer
def byte_alphabet() -> dict[int, str]:
    """Byte -> printable character, the byte-level BPE convention (GPT-2): printable Latin-1
    bytes stand for themselves, the other 68 bytes map to U+0100 upwards in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    mapping, extra = {}, 0
    for b in range(256):
        if b in keep:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


_WORDS = (
    "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "a", "an", "and", "or",
    "but", "if", "then", "else", "when", "while", "for", "to", "of", "in", "on", "at", "by",
    "with", "from", "into", "over", "under", "after", "before", "between", "model", "serve",
    "token", "tokens", "prefill", "decode", "cache", "memory", "request", "response", "latency",
    "throughput", "batch", "host", "node", "engine", "router", "worker", "health", "ready",
    "running", "stopped", "start", "stop", "deploy", "install", "python", "system", "service",
    "unit", "config", "value", "key", "list", "error", "warning", "info", "debug", "hello",
    "world", "lab", "test", "tiny", "llama", "weight", "layer", "head", "hidden", "attention",
    "vector", "matrix", "random", "seed", "question", "answer", "user", "assistant", "message",
    "content", "role", "chat", "completion", "stream", "time", "first", "second", "third",
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "zero", "is",
    "are", "was", "were", "be", "been", "has", "have", "had", "do", "does", "did", "can",
    "could", "will", "would", "should", "may", "might", "must", "this", "that", "these",
    "those", "here", "there", "what", "which", "who", "whom", "whose", "why", "how", "all",
    "any", "each", "few", "more", "most", "other", "some", "such", "no", "nor", "not", "only",
    "own", "same", "so", "than", "too", "very", "just", "now",
)


def corpus() -> list[str]:
    """The fixed training text: every word alone, in pairs, and digits and punctuation."""
    lines = [" ".join(_WORDS[i:i + 8]) for i in range(0, len(_WORDS), 8)]
    lines += [f"{w} {_WORDS[(i * 7) % len(_WORDS)]}, {i}." for i, w in enumerate(_WORDS)]
    lines += ["0123456789 " * 3, "Hello, world! What is the answer? It is 42."]
    return lines


_PRETOKEN = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def train_bpe(lines: list[str], n_merges: int) -> list[tuple[str, str]]:
    """Learn up to ``n_merges`` byte-level BPE merges from ``lines``. Deterministic: the most
    frequent adjacent pair wins, ties go to the smallest pair in string order."""
    alpha = byte_alphabet()
    words = Counter()
    for line in lines:
        for piece in _PRETOKEN.findall(line):
            words[tuple(alpha[b] for b in piece.encode())] += 1
    merges: list[tuple[str, str]] = []
    while len(merges) < n_merges:
        pairs: Counter = Counter()
        for word, freq in words.items():
            for a, b in pairwise(word):
                pairs[(a, b)] += freq
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        joined = best[0] + best[1]
        new: Counter = Counter()
        for word, freq in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(joined)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            new[tuple(out)] += freq
        words = new
    return merges


def tokenizer_json() -> dict:
    """A Hugging Face ``tokenizers`` file: byte-level BPE, vocab ``VOCAB`` (id 0 is the
    special end-of-text token, ids 1..256 the byte alphabet, then the merges)."""
    alpha = byte_alphabet()
    vocab = {SPECIAL: 0}
    for b in range(256):
        vocab[alpha[b]] = len(vocab)
    merges = train_bpe(corpus(), VOCAB - len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    if len(vocab) != VOCAB:
        raise TinyModelError(f"tokenizer vocab is {len(vocab)}, expected {VOCAB}: corpus too small")
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": 0, "content": SPECIAL, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": dict(byte_level, trim_offsets=False),
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }


# ---------------------------------------------------------------- weights
def tensor_shapes() -> dict[str, tuple[int, ...]]:
    """Name -> shape of every weight of the Llama checkpoint (HF ``LlamaForCausalLM`` names,
    tied embeddings so no ``lm_head.weight``)."""
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (VOCAB, HIDDEN),
                                          "model.norm.weight": (HIDDEN,)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (HIDDEN,)
        shapes[p + "post_attention_layernorm.weight"] = (HIDDEN,)
        shapes[p + "self_attn.q_proj.weight"] = (HEADS * HEAD_DIM, HIDDEN)
        shapes[p + "self_attn.k_proj.weight"] = (KV_HEADS * HEAD_DIM, HIDDEN)
        shapes[p + "self_attn.v_proj.weight"] = (KV_HEADS * HEAD_DIM, HIDDEN)
        shapes[p + "self_attn.o_proj.weight"] = (HIDDEN, HEADS * HEAD_DIM)
        shapes[p + "mlp.gate_proj.weight"] = (INTERMEDIATE, HIDDEN)
        shapes[p + "mlp.up_proj.weight"] = (INTERMEDIATE, HIDDEN)
        shapes[p + "mlp.down_proj.weight"] = (HIDDEN, INTERMEDIATE)
    return shapes


def _bf16(values: list[float]) -> bytes:
    """Little-endian bf16 bytes of ``values`` (float32, truncated to the high 16 bits)."""
    halves = array("H")
    halves.frombytes(array("f", values).tobytes())
    if struct.pack("=H", 1) != b"\x01\x00":  # pragma: no cover - big-endian controllers
        raise TinyModelError("the lab model generator needs a little-endian machine")
    return halves[1::2].tobytes()


def safetensors_bytes(seed: int = SEED, std: float = 0.02) -> bytes:
    """The checkpoint in the safetensors format (8-byte little-endian header length, JSON
    header, data): norms are 1.0, every other weight uniform in +-std*sqrt(3), drawn from
    ``random.Random(seed)`` in name order."""
    rng = random.Random(seed)
    bound = std * 3 ** 0.5
    header: dict = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name, shape in sorted(tensor_shapes().items()):
        n = 1
        for d in shape:
            n *= d
        if name.endswith("norm.weight"):
            data = _bf16([1.0] * n)
        else:
            data = _bf16([(rng.random() * 2 - 1) * bound for _ in range(n)])
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


def config_json() -> dict:
    """``config.json`` of the Llama checkpoint."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "vocab_size": VOCAB,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "bos_token_id": 0,
        "eos_token_id": 0,
    }


def repo_files() -> dict[str, bytes]:
    """Path -> bytes of every file in the checkpoint repo (deterministic)."""
    def js(obj) -> bytes:
        return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()

    return {
        "README.md": (
            f"# {REPO_ID}\n\nRandom weights for the glmops lab (generated by glmops.lab.tinymodel, "
            f"seed {SEED}). Llama, hidden {HIDDEN}, {HEADS} heads of {HEAD_DIM}, {LAYERS} layers, "
            f"vocab {VOCAB}. Says nothing useful.\n"
        ).encode(),
        "config.json": js(config_json()),
        "generation_config.json": js({"bos_token_id": 0, "eos_token_id": 0}),
        "model.safetensors": safetensors_bytes(),
        "special_tokens_map.json": js({"bos_token": SPECIAL, "eos_token": SPECIAL}),
        "tokenizer.json": js(tokenizer_json()),
        "tokenizer_config.json": js({
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": SPECIAL,
            "eos_token": SPECIAL,
            "model_max_length": 2048,
            "clean_up_tokenization_spaces": False,
            "chat_template": CHAT_TEMPLATE,
        }),
    }


# ---------------------------------------------------------------- repo
def default_root() -> Path:
    """``~/.cache/glmops/models`` (``$GLMOPS_CACHE`` replaces ``~/.cache/glmops``)."""
    base = os.environ.get("GLMOPS_CACHE") or os.path.join(Path.home(), ".cache", "glmops")
    return Path(base) / "models"


def _git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_ENV)
    try:
        return subprocess.run(["git", "-c", "core.autocrlf=false", "-c", "commit.gpgsign=false", *args],
                              cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout.strip()
    except FileNotFoundError:
        raise TinyModelError("git is not installed (apt-get install git)") from None
    except subprocess.CalledProcessError as exc:
        raise TinyModelError(f"git {' '.join(args)} failed in {cwd}: {exc.stderr.strip()}") from None


def blob_sha1(data: bytes) -> str:
    """Git's blob object id of ``data`` (what the hub answers as ETag for non-LFS files)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class TinyModel:
    """A built lab model: hub-style ``repo_id``, 40-hex ``commit``, work tree ``path``."""

    repo_id: str
    commit: str
    path: Path

    def files(self) -> list[dict]:
        """Every file at the commit: ``path``, ``size`` (bytes), ``blob_sha1``, ``sha256``."""
        out = []
        for rel in sorted(repo_files()):
            data = (self.path / rel).read_bytes()
            out.append({"path": rel, "size": len(data), "blob_sha1": blob_sha1(data),
                        "sha256": hashlib.sha256(data).hexdigest()})
        return out


def _head(path: Path) -> str | None:
    if not (path / ".git").is_dir():
        return None
    try:
        if _git(path, "status", "--porcelain"):
            return None
        return _git(path, "rev-parse", "HEAD")
    except TinyModelError:
        return None


def build_repo(dest: Path) -> str:
    """Write the files into a new git repo at ``dest`` (must not exist) and commit them with
    the fixed identity and dates; return the commit sha."""
    dest.mkdir(parents=True)
    for rel, data in repo_files().items():
        (dest / rel).write_bytes(data)
        os.chmod(dest / rel, 0o644)
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "add", "--all")
    _git(dest, "commit", "-q", "--no-verify", "-m", COMMIT_MESSAGE)
    return _git(dest, "rev-parse", "HEAD")


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def ensure_tiny_model(root: Path | None = None, expect: str | None = TINY_LLAMA_COMMIT) -> TinyModel:
    """Build the lab model under ``root/glmops-lab/tiny-llama`` unless it is already there
    at ``expect`` with a clean work tree. Raises TinyModelError when the built commit is not
    ``expect`` (pass ``expect=None`` to accept any: used to learn the constant)."""
    root = Path(root) if root else default_root()
    path = root / ORG / NAME
    with _locked(path):
        head = _head(path)
        if head is not None and (expect is None or head == expect):
            return TinyModel(REPO_ID, head, path)
        tmp = path.with_name(f".{NAME}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            sha = build_repo(tmp)
            if expect is not None and sha != expect:
                raise TinyModelError(
                    f"built {REPO_ID} at commit {sha}, expected {expect}: the generator is not "
                    "deterministic on this machine (or changed without updating TINY_LLAMA_COMMIT)"
                )
            shutil.rmtree(path, ignore_errors=True)
            tmp.rename(path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return TinyModel(REPO_ID, sha, path)


@click.group("tinymodel")
def tinymodel_cli() -> None:
    """The lab's tiny random Llama checkpoint repo."""


@tinymodel_cli.command("build")
@click.option("--root", type=click.Path(path_type=Path), default=None,
              help="models root (default ~/.cache/glmops/models)")
def build_cmd(root: Path | None) -> None:
    """Build (or reuse) the lab model; print repo id, commit and path."""
    try:
        m = ensure_tiny_model(root)
    except TinyModelError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{m.repo_id} {m.commit} {m.path}")


if __name__ == "__main__":  # pragma: no cover
    tinymodel_cli(prog_name="python -m glmops.lab.tinymodel")
