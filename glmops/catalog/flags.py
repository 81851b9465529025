"""Option names the engines' and routers' parsers accept: catalog facts, one text file per parser
under ``glmops/catalog/flags/``, each with its ``source:`` header.

``glmops.rules`` checks ``engine_args`` / ``router.args`` keys (and TensorRT-LLM ``engine_config``
top-level keys) against them before any host is touched (rule ``ENGINE_FLAG``). Files are read
only for the parsers a deployment uses, once per process (:func:`load` is cached), so
``glmops plan`` of a large inventory does not pay for them.

File format (``#`` lines are comments; the first ones carry ``source:``)::

    [section]                 optional; groups the following options (vLLM: frontend | engine)
    --name --alias ... [bool] [choices=JSON]
                              one option per line: long names, first = canonical; ``bool`` marks a
                              vLLM ``EnableDisableAction`` flag (vLLM also takes ``--no-<name>``);
                              ``choices=["a","b"]`` the closed set of values the parser accepts
                              (argparse ``choices=``, or vLLM's ``metavar`` set where vLLM checks the
                              name itself, e.g. ``--tool-call-parser``), compact JSON, last on the line

Value sets the dumps lack (vLLM's ``--reasoning-parser`` is a free string checked at start-up;
TensorRT-LLM's Click choices and YAML enums) are in ``glmops/catalog/flags/choices.yaml``, each
with its source, merged into the same :class:`FlagList` (:attr:`FlagList.choices`).

Each list is from one version (``Parser.version``). A deployment running another version (the
catalog's vLLM default is 0.29.0, Dynamo 1.6.1 pins vLLM 0.31.0 / SGLang 0.5.21) is checked against
it anyway: a typo is a typo in every version, and the problem's hint names both versions so a flag
that only an older release knew can be told apart. Unique-prefix abbreviations, which argparse
would accept, are refused: they break when a release adds a longer flag (SGLang 0.5.23 made
``--cuda-graph-max-bs`` ambiguous).

Single-dash short aliases (``-tp``) are left out: glmops renders every ``engine_args`` key as
``--<key>``. ``-h/--help`` and ``--version`` are left out too.

Sources: /work/shared/reference/option-lists/*.txt (dumped from the real argparse parsers;
regenerate with ``python -m glmops.catalog.flags DIR``) and reference/trtllm-serve.md (Click
options and YAML keys, written by hand: no dump exists).
"""
from __future__ import annotations

import ast
import functools
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

FLAGS_DIR = Path(__file__).resolve().parent / "flags"


@dataclass(frozen=True)
class Parser:
    """One parser whose option names the catalog holds.

    ``spelling``: ``vllm`` = ``_`` and ``-`` are the same before the first ``.`` and dotted keys
    (``speculative-config.method``) address a JSON flag's fields (vLLM's
    ``FlexibleArgumentParser``); ``exact`` = names as declared (argparse, Click).
    ``dump`` is the reference option-list file it is generated from (None: written by hand).
    ``split`` names the first option of the second section (vLLM: ``--model`` starts the engine
    arguments, the only ones ``dynamo.vllm`` takes).
    """

    key: str
    tool: str
    version: str
    file: str
    source: str
    spelling: str = "exact"
    dump: str | None = None
    sections: tuple[str, ...] = ()
    split: str | None = None
    yaml: bool = False

    @property
    def label(self) -> str:
        return f"{self.tool} {self.version}"


_REF = "reference/option-lists/"
PARSERS: dict[str, Parser] = {p.key: p for p in (
    Parser("vllm-serve", "vllm serve", "0.33.0", "vllm-0.33.0-serve.txt", _REF + "vllm-0.33.0-serve.txt",
           spelling="vllm", dump="vllm-0.33.0-serve.txt", sections=("frontend", "engine"), split="--model"),
    Parser("sglang-serve", "sglang serve", "0.5.23", "sglang-0.5.23-serve.txt", _REF + "sglang-0.5.23-serve.txt",
           dump="sglang-0.5.23-serve.txt"),
    Parser("vllm-router", "vllm-router", "0.1.17", "vllm-router-0.1.17.txt", _REF + "vllm-router-0.1.17.txt",
           dump="vllm-router-0.1.17.txt"),
    Parser("sglang-router", "sglang-router", "0.3.2", "sglang-router-0.3.2.txt", _REF + "sglang-router-0.3.2.txt",
           dump="sglang-router-0.3.2.txt"),
    Parser("dynamo-frontend", "python -m dynamo.frontend", "1.6.1", "dynamo-1.6.1-frontend.txt",
           _REF + "dynamo-1.6.1-frontend.txt", dump="dynamo-1.6.1-frontend.txt"),
    Parser("dynamo-vllm-worker", "python -m dynamo.vllm (Dynamo flags)", "1.6.1", "dynamo-1.6.1-vllm-worker.txt",
           _REF + "dynamo-1.6.1-vllm-worker.txt", dump="dynamo-1.6.1-vllm-worker.txt"),
    Parser("dynamo-sglang-worker", "python -m dynamo.sglang (Dynamo flags)", "1.6.1",
           "dynamo-1.6.1-sglang-worker.txt", _REF + "dynamo-1.6.1-sglang-worker-dynamo-flags.txt",
           dump="dynamo-1.6.1-sglang-worker-dynamo-flags.txt"),
    Parser("trtllm-serve", "trtllm-serve", "1.3.0rc29", "trtllm-serve.txt",
           "reference/trtllm-serve.md §1 (S4 column) + seeds/000 (--tool_parser, --reasoning_parser)"),
    Parser("trtllm-llm-api", "trtllm-serve --config YAML (TorchLlmArgs)", "1.3.0rc29", "trtllm-llm-api.txt",
           "reference/trtllm-serve.md §3 (top-level keys) and §2 (backend)", yaml=True),
    Parser("trtllm-disagg", "trtllm-serve disaggregated config YAML", "1.3.0rc29", "trtllm-disagg.txt",
           "reference/trtllm-serve.md §2 (top level of extract_disagg_cfg)", yaml=True),
)}


def canon(parser: Parser, key: str) -> str:
    """The form a key is compared in: leading dashes dropped; vLLM also folds ``_`` into ``-``
    before the first ``.`` and ignores the dotted tail (a JSON flag's field)."""
    key = str(key).lstrip("-") if not parser.yaml else str(key)
    if parser.spelling == "vllm":
        key = key.split(".", 1)[0].replace("_", "-")
    return key


@dataclass
class FlagList:
    """The accepted names of one parser. ``primary``: every accepted spelling (compared form,
    see :func:`canon`) -> the option's canonical name; ``section``: canonical name -> section;
    ``bools``: canonical names that also take ``no-<name>`` (vLLM)."""

    parser: Parser
    primary: dict[str, str] = field(default_factory=dict)
    section: dict[str, str] = field(default_factory=dict)
    bools: frozenset[str] = frozenset()
    count: int = 0
    #: canonical name (a YAML key may be dotted: ``moe_config.backend``) -> accepted values
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: canonical name -> where its value set comes from (the dump, or choices.yaml's ``source``)
    choice_source: dict[str, str] = field(default_factory=dict)
    #: canonical name -> options that make the set open (a plugin that registers more names)
    choice_open_with: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def accepted_values(self, name: str) -> tuple[str, ...] | None:
        """The closed set of values option ``name`` (canonical) takes, or None (any value)."""
        return self.choices.get(name)

    def resolve(self, key: str, sections: tuple[str, ...] | None = None) -> str | None:
        """Canonical name of the option ``key`` names (e.g. vLLM ``tensor_parallel_size`` ->
        ``tensor-parallel-size``, SGLang ``tensor-parallel-size`` -> ``tp-size``), or None when
        this parser (restricted to ``sections``) does not accept it."""
        name = canon(self.parser, key)
        hit = self.primary.get(name)
        if hit is None and self.parser.spelling == "vllm" and name.startswith("no-"):
            base = self.primary.get(name[3:])
            hit = base if base in self.bools else None
        if hit is not None and sections and self.section.get(hit) not in sections:
            return None
        return hit

    def spellings(self, sections: tuple[str, ...] | None = None) -> list[str]:
        """Every accepted spelling (for close-match hints)."""
        return [s for s, p in self.primary.items() if not sections or self.section.get(p) in sections]


@functools.cache
def load(key: str) -> FlagList:
    """The :class:`FlagList` of parser ``key`` (a :data:`PARSERS` key), read once per process.
    Raises KeyError for an unknown key, OSError when the packaged file is missing."""
    parser = PARSERS[key]
    out = FlagList(parser)
    bools: set[str] = set()
    current = ""
    with open(FLAGS_DIR / parser.file, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("[") and line.endswith("]"):
                current = line[1:-1]
                continue
            line, _, values = line.partition(" choices=")
            words = line.split()
            is_bool = words[-1] == "bool"
            names = [canon(parser, w) for w in words if w != "bool"]
            first = names[0]
            out.count += 1
            for name in names:
                out.primary.setdefault(name, first)
            out.section[first] = current
            if is_bool:
                bools.add(first)
            if values:
                out.choices[first] = tuple(str(v) for v in json.loads(values))
                out.choice_source[first] = parser.source
    out.bools = frozenset(bools)
    _merge_extra_choices(out)
    return out


CHOICES_FILE = FLAGS_DIR / "choices.yaml"


@functools.cache
def _extra_choices() -> dict:
    import yaml  # the catalog's own loader uses it too; imported here so plain name look-ups skip it

    with open(CHOICES_FILE, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


def _merge_extra_choices(out: FlagList) -> None:
    """Add the value sets ``choices.yaml`` holds for this parser (they win over a dump's)."""
    for key, entry in ((_extra_choices().get("parsers") or {}).get(out.parser.key) or {}).items():
        name = key if out.parser.yaml else (out.resolve(key) or canon(out.parser, key))
        if entry.get("values") is not None:
            out.choices[name] = tuple(str(v) for v in entry["values"])
            out.choice_source[name] = str(entry["source"])
        if entry.get("open_with"):
            out.choice_open_with[name] = tuple(canon(out.parser, k) for k in entry["open_with"])


_LIST_RE = re.compile(r"(\[[^\]]*\]|\([^)]*\))")


def _literal_list(text: str) -> list[str] | None:
    """``['a', 'b']`` / ``('a', 'b')`` / ``{a,b}`` at the start of ``text`` as a list, else None."""
    text = text.strip()
    if text.startswith("{"):
        body = text[1:text.index("}")]
        return [v.strip() for v in body.split(",") if v.strip()]
    found = _LIST_RE.match(text)
    if not found:
        return None
    try:
        values = ast.literal_eval(found.group(1))
    except (ValueError, SyntaxError):
        return None
    return [str(v) for v in values] if isinstance(values, (list, tuple)) else None


def dump_choices(line: str) -> list[str] | None:
    """The closed value set of one dump line: argparse ``choices=[...]`` / ``choices [...]`` (Dynamo's
    frontend dump), else a vLLM ``metavar=`` set or list (vLLM lists the names it checks itself
    there: ``--tool-call-parser``, ``--distributed-executor-backend``), else None."""
    _head, _, rest = line.partition(" | ")
    for pattern in (r"\bchoices[= ]", r"\bmetavar="):
        found = re.search(pattern, rest)
        if found:
            values = _literal_list(rest[found.end():])
            if values:
                return values
    return None


# ----------------------------------------------------------------------------- generation


def _names(line: str) -> tuple[list[str], bool]:
    """(long option names, is an EnableDisableAction/BooleanOptionalAction) of one dump line."""
    head, _, rest = line.partition(" | ")
    if head.startswith("["):
        words = list(ast.literal_eval(head.strip()))
    else:
        words = head.split()
    names = [w for w in words if w.startswith("--") and w not in ("--help", "--version")]
    return names, bool(re.search(r"action=EnableDisableAction", rest))


def render(parser: Parser, dump_text: str) -> str:
    """The catalog file text for ``parser`` from its reference dump (names only, no help)."""
    lines = [f"# Options accepted by `{parser.tool}` {parser.version}: names only (glmops catalog).",
             f"# source: {parser.source} (dumped from the real parser)",
             "# regenerate: python -m glmops.catalog.flags /work/shared/reference/option-lists",
             "# format: long names of one option per line, canonical first; 'bool' = vLLM EnableDisableAction;",
             "#   choices=JSON = the values the parser accepts (argparse choices, or vLLM's metavar set)"]
    section = parser.sections[0] if parser.sections else ""
    if section:
        lines.append(f"[{section}]")
    for raw in dump_text.splitlines():
        if not raw.strip():
            continue
        names, is_bool = _names(raw)
        if not names:
            continue
        if parser.split and parser.split in names and len(parser.sections) > 1:
            lines.append(f"[{parser.sections[1]}]")
        values = dump_choices(raw)
        lines.append(" ".join(names) + (" bool" if is_bool else "")
                     + (f" choices={json.dumps(values, separators=(',', ':'))}" if values else ""))
    return "\n".join(lines) + "\n"


def regenerate(dump_dir: str | Path) -> list[Path]:
    """Rewrite every generated file from the dumps in ``dump_dir``; returns the files written."""
    written = []
    for parser in PARSERS.values():
        if not parser.dump:
            continue
        text = (Path(dump_dir) / parser.dump).read_text(encoding="utf-8")
        path = FLAGS_DIR / parser.file
        path.write_text(render(parser, text), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    if len(sys.argv) != 2:
        sys.exit("usage: python -m glmops.catalog.flags /work/shared/reference/option-lists")
    for p in regenerate(sys.argv[1]):
        print(p)
