"""``glmops_endpoint``: one-token request through the deployment's endpoint, from the controller.

The last check of ``glmops deploy`` (playbooks/plays/services.yml): the endpoint the
users will call answers a completion. It runs inside the controller's Ansible worker
(no module process: ``ansible.builtin.uri`` on localhost costs a Python start per
call, most of a no-op redeploy's controller time), with the same request and retry
policy the ``uri`` task had.

Options:
  url:     the endpoint's one-token URL (``plan.endpoint_ready_url``), required;
           a ``.../chat/completions`` URL gets a chat body, anything else a prompt body
  model:   served model name, required
  timeout: seconds per request (default 120)
  retries: further attempts after the first (default 3); delay: seconds between (default 2)

With ``glmops_api_key`` in the play's variables (normally from Ansible Vault) the request carries
``Authorization: Bearer <key>``; the key is read here from the variables, never a task argument,
and never returned.

Returns ``status`` (HTTP status, -1 when nothing answered), ``attempts``, ``elapsed_s``;
fails naming the URL, the last status and the start of the answer unless it is 200 with at
least one choice. Check mode: nothing is sent (``skipped``).
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase


def one_token(url: str, model: str, timeout: float, key: str = "") -> tuple[int, bytes]:
    """POST a one-token completion (or chat completion) to ``url`` (``Authorization: Bearer key`` when
    a key is given); (status, body), -1 if no answer."""
    if url.rstrip("/").endswith("/chat/completions"):
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    else:
        body = {"model": model, "prompt": "hi", "max_tokens": 1}
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() if exc.fp else b""
    except (OSError, ValueError):
        return -1, b""


def has_choice(raw: bytes) -> bool:
    try:
        return bool(json.loads(raw).get("choices"))
    except (ValueError, AttributeError):
        return False


def api_key(templar, task_vars: dict) -> str:
    """``glmops_api_key`` of the play (Vault values decrypted, Jinja rendered); "" when unset."""
    raw = task_vars.get("glmops_api_key")
    if raw in (None, ""):
        return ""
    value = templar.template(raw) if templar is not None else raw
    return str(value) if value not in (None, "") else ""


class ActionModule(ActionBase):
    """See the module docstring."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("url", "model", "timeout", "retries", "delay"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars or {})
        result["changed"] = False
        result["glmops_event"] = "endpoint"  # glmops.runner.event_of: the endpoint answered (or not)
        args = self._task.args
        url, model = str(args.get("url") or ""), str(args.get("model") or "")
        if not url or not model:
            raise AnsibleActionFail(f"glmops_endpoint: url ({url!r}) and model ({model!r}) are required")
        try:
            timeout = float(args.get("timeout", 120))
            retries = int(args.get("retries", 3))
            delay = float(args.get("delay", 2))
        except (TypeError, ValueError) as exc:
            raise AnsibleActionFail(f"glmops_endpoint: timeout/retries/delay must be numbers: {exc}") from exc
        if self._task.check_mode:
            result.update(skipped=True, msg=f"check mode: no request to {url}")
            return result
        key = api_key(self._templar, task_vars or {})
        start = time.monotonic()
        status, raw = -1, b""
        for attempt in range(1, retries + 2):
            status, raw = one_token(url, model, timeout, key)
            if status == 200 and has_choice(raw):
                result.update(status=status, attempts=attempt, elapsed_s=round(time.monotonic() - start, 2),
                              msg=f"endpoint {url} ({model}) answered a one-token request")
                return result
            if attempt <= retries:
                time.sleep(delay)
        answer = raw[:300].decode(errors="replace")
        if key:
            answer = answer.replace(key, "<redacted>")
        result.update(failed=True, status=status, attempts=retries + 1,
                      elapsed_s=round(time.monotonic() - start, 2),
                      msg=f"one-token request to {url} (model {model}) answered "
                          f"{status if status > 0 else 'nothing'} after {retries + 1} attempt(s)"
                          + (f": {answer}" if answer else ""))
        return result
