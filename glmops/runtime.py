"""Engine runtimes: what goes into an engine's environment on top of the engine itself.

Pure (no I/O beyond the catalog). Used by ``glmops.deployview`` (the Plan's per-host
``runtimes``) and so by ``roles/engine_runtime``:

* :func:`engine_pins` -> the requirement specifiers installed together with an engine
  (venv runtime: resolved with the engine before the host changes, F15; container runtime:
  the derived image's pip layer).

Sources: seed 000 (TensorRT-LLM needs ``fla-core`` and ``einops``; image and video input
need ``transformers==5.17.0`` and, for video, ``opencv-python-headless``), the catalog's
``engines.<key>.pip`` / ``multimodal_pip``, and the inventory's ``glmops_pip_extra``.
"""
from __future__ import annotations

import re

from glmops.model import Deployment
from glmops.resources import data_root

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def requirement_name(spec: str) -> str:
    """Normalised project name of a requirement specifier (PEP 503: lower case, runs of
    ``-_.`` as ``-``): ``"Transformers==5.17.0"`` -> ``"transformers"``. Raises ValueError
    naming the specifier when it has no project name."""
    m = _NAME.match(str(spec))
    if not m:
        raise ValueError(f"requirement {spec!r} has no project name")
    return re.sub(r"[-_.]+", "-", m.group(1)).lower()


def engine_pins(dep: Deployment, engine_key: str) -> list[str]:
    """Requirement specifiers installed together with ``engine_key`` for ``dep``.

    Catalog ``engines.<key>.pip`` (every deployment of that engine), ``multimodal_pip`` when
    ``dep.multimodal``, then ``dep.pip_extra`` (``glmops_pip_extra``); only the
    deployment's own engine gets the multimodal and extra pins (routers, frontends do not load
    the model). A later specifier for the same project replaces an earlier one, so an
    inventory pin wins over the catalog's. Order: first appearance of each project.
    """
    from glmops import catalog as cat

    try:
        entry = cat.load().engine(engine_key)
    except LookupError:
        entry = {}
    specs = [str(s) for s in entry.get("pip") or []]
    if engine_key == dep.engine:
        if dep.multimodal:
            specs += [str(s) for s in entry.get("multimodal_pip") or []]
        specs += [str(s) for s in dep.pip_extra or []]
    out: dict[str, str] = {}
    for spec in specs:
        out[requirement_name(spec)] = spec.strip()
    return list(out.values())


#: roles/engine_runtime's Dockerfile template: one template for the role and for the Plan.
DOCKERFILE_TEMPLATE = data_root() / "roles" / "engine_runtime" / "templates" / "Dockerfile.j2"
_SAFE_PIN = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._\-\[\],<>=!~*;: \'@/+]*\Z')
_SAFE_IMAGE = re.compile(r"^[a-z0-9][A-Za-z0-9._\-/:@]*\Z")


def image_repo(engine_key: str) -> str:
    """Local repository of the derived images of ``engine_key``: ``glmops/<engine with _ as ->``."""
    return f"glmops/{engine_key.replace('_', '-')}"


def derived_image(engine_key: str, version: str, image: str, pins: list[str]) -> dict[str, str]:
    """The container runtime's derived image: ``{image, tag, dockerfile}``.

    ``dockerfile``: roles/engine_runtime/templates/Dockerfile.j2 rendered as Ansible renders it
    (trim_blocks, trailing newline kept): ``FROM image``, one exec-form ``pip install`` of
    ``pins``, labels. ``tag``: ``glmops/<engine>:<version>-<first 12 hex of sha256(dockerfile)>``
    (the Dockerfile holds the base image and every pin, so any change gives a new tag). No pins:
    the seed's image itself (``tag == image``, ``dockerfile`` empty). Raises ValueError naming
    every pin or image that cannot go into a Dockerfile safely. Source: seed 000 ("install
    fla-core and einops in the container", transformers==5.17.0 for image/video,
    opencv-python-headless for video).
    """
    import hashlib

    import jinja2

    bad = [f"pin {p!r}" for p in pins if not _SAFE_PIN.match(p)]
    if not _SAFE_IMAGE.match(image or ""):
        bad.append(f"image {image!r}")
    if bad:
        raise ValueError("cannot build a derived image from " + ", ".join(bad)
                         + ": accepted are requirement specifiers and image references without quotes, "
                           "backslashes or line breaks")
    if not pins:
        return {"image": image, "tag": image, "dockerfile": ""}
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    text = env.from_string(DOCKERFILE_TEMPLATE.read_text()).render(
        engine_runtime_engine=engine_key, engine_runtime_version=version, engine_runtime_image=image,
        engine_runtime_pins=list(pins))
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return {"image": image, "tag": f"{image_repo(engine_key)}:{version}-{digest}", "dockerfile": text}
