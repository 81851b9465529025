"""Issue 14 items 5 and 8 from minimal inventories (as tests/unit/test_minimal_defaults.py writes them):
input modalities per serving path, the seed 001 part glmops records as not rendered, and the overlay it renders
(catalog ``engines.<engine>.compat``, glmops/engines/compat.py).

Sources: seeds/001_45b716f972606a07.txt line 149 ("Disaggregated workers ... support text and image
input only"), line 151 ("Video input is unavailable in the SGLang disaggregated recipe"), line 206 (input
modalities), line 218 ("A sitecustomize.py overlay disables cuDNN ... with the GLM-specific vLLM image"),
lines 24 and 203 ("Mooncake over NVLink with MNNVL"). The overlay's text is not in the seed: glmops renders
PyTorch's switch (torch.backends.cudnn.enabled = False) in a sitecustomize.py on the container's PYTHONPATH."""
from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from seed_text import seed
from test_minimal_defaults import minimal

from glmops import planning, render
from glmops.cli import main

SEED_001 = "seeds/001_45b716f972606a07.txt"
SGLANG = {"model": "glm-5.3-flash", "engine": "dynamo", "dynamo_backend": "sglang", "hardware": "gb200",
          "runtime": "venv"}


def validate(inv, *extra) -> tuple[int, list[str]]:
    res = CliRunner().invoke(main, ["validate", "-i", str(inv), *extra])
    return res.exit_code, res.output.splitlines()


def test_sglang_disaggregated_with_video_is_refused_naming_key_value_accepted_and_source(tmp_path):
    inv = minimal(tmp_path, n_hosts=3, topology="disagg", multimodal=True, video=True, **SGLANG)
    code, lines = validate(inv)
    assert code == 2
    (line,) = [ln for ln in lines if "[ENGINE_COMBINATION]" in ln]
    assert "glmops_video" in line and "video input (glmops_video true)" in line
    assert "accepted: text and image input (glmops_video false)" in line
    assert f"{SEED_001} line 151" in line and "SGLang 0.5.21" in line      # Dynamo 1.6.1's pinned SGLang


def test_sglang_disaggregated_with_images_only_and_aggregated_with_video_pass(tmp_path):
    # seed 001 line 206: GB200 Disaggregated "Text, images"; Aggregated "Text, images, video"
    planning.load(str(minimal(tmp_path, n_hosts=3, topology="disagg", multimodal=True, **SGLANG)))
    planning.load(str(minimal(tmp_path, name="agg", multimodal=True, video=True, **SGLANG)))


def test_video_without_multimodal_is_refused(tmp_path):
    inv = minimal(tmp_path, video=True, **SGLANG)
    code, lines = validate(inv)
    assert code == 2
    (line,) = [ln for ln in lines if "[MULTIMODAL]" in ln]
    assert "glmops_video" in line and "accepted: glmops_multimodal true, or glmops_video false" in line


def _overlay(svc):
    return [f for f in svc.files if f.path.endswith("/sitecustomize.py")]


@pytest.mark.parametrize("engine", [{"engine": "vllm"}, {"engine": "dynamo", "dynamo_backend": "vllm"}])
def test_the_glm_vllm_image_gets_the_cudnn_off_sitecustomize_overlay(tmp_path, engine):
    # the container runtime runs the seed's vllm/vllm-openai:glm53-flash image (catalog image_by_model)
    inv = minimal(tmp_path, model="glm-5.3-flash", hardware="h200", runtime="container", deployment="d1", **engine)
    planned = planning.load(str(inv))
    workers = [s for s in planned.plan.services if s.role == "agg"]
    assert workers and all(s.image for s in workers)
    for svc in workers:
        (cf,) = _overlay(svc)
        assert cf.path == "/etc/glmops/d1/sitecustomize.py" and cf.mode == "0644"
        assert "torch.backends.cudnn.enabled = False" in cf.content and "seed 001 line 218" in cf.content
        assert svc.env["PYTHONPATH"] == "/etc/glmops/d1"
        argv = render.exec_argv(planned.deployment, svc)            # the config dir is mounted read-only
        assert "/etc/glmops/d1:/etc/glmops/d1:ro" in argv
    assert not [w for w in planned.warnings if w.code == "RECIPE_NOT_RENDERED"]
    out = tmp_path / "out"
    CliRunner().invoke(main, ["plan", "-i", str(inv), "--out", str(out)], catch_exceptions=False)
    [written] = list(out.glob("*/etc/glmops/d1/sitecustomize.py"))
    assert "torch.backends.cudnn.enabled = False" in written.read_text()


def test_venv_runtime_and_other_images_get_no_overlay(tmp_path):
    venv = planning.load(str(minimal(tmp_path, model="glm-5.3-flash", engine="vllm", hardware="h200",
                                     runtime="venv")))
    other = planning.load(str(minimal(tmp_path, name="other", model="glm-5.3-flash", engine="vllm", hardware="h200",
                                      runtime="container", image="vllm/vllm-openai:latest")))
    for planned in (venv, other):
        assert all(not _overlay(s) and "PYTHONPATH" not in s.env for s in planned.plan.services)


def test_gb200_sglang_disaggregated_warns_that_the_mooncake_nvlink_env_is_not_rendered(tmp_path):
    planned = planning.load(str(minimal(tmp_path, n_hosts=3, topology="disagg", **SGLANG)))
    (w,) = [w for w in planned.warnings if w.code == "RECIPE_NOT_RENDERED" and "Mooncake" in w.message]
    assert "Mooncake KV transfer over NVLink with MNNVL" in w.message and SEED_001 in w.message
    assert "line 203" in w.message and "names the transport but no environment variable" in w.message
    agg = planning.load(str(minimal(tmp_path, name="agg", **SGLANG)))   # no KV transfer on one worker
    assert not [w for w in agg.warnings if w.code == "RECIPE_NOT_RENDERED" and "Mooncake" in w.message]


@pytest.mark.parametrize("gv,warned", [
    ({"engine": "dynamo", "hardware": "gb200"}, True),                      # seed 001, vLLM backend
    ({**SGLANG}, True),                                                        # seed 001, SGLang backend
    ({"engine": "vllm", "hardware": "gb200"}, False),                       # seed 002 names no ComputeDomain
    ({"engine": "dynamo", "hardware": "h200"}, False),
])
def test_dynamo_on_gb200_warns_that_the_computedomain_and_mnnvl_are_not_rendered(tmp_path, gv, warned):
    """An independent audit of the seeds against plan --out: seed 001's GB200 targets "require a
    ComputeDomain spanning the full NVL72 rack" and "use MNNVL for TP4 collectives"; glmops renders
    neither (no Kubernetes DRA driver on bare hosts, no IMEX channel) and said nothing."""
    planned = planning.load(str(minimal(tmp_path, **{"model": "glm-5.3-flash", **gv})))
    found = [w for w in planned.warnings if w.code == "RECIPE_NOT_RENDERED" and "ComputeDomain" in w.message]
    assert bool(found) == warned, planned.warnings
    if warned:
        assert "line 33" in found[0].message and "line 216" in found[0].message and SEED_001 in found[0].message


def test_prefill_and_decode_on_one_host_share_the_overlay_placed_once(tmp_path):
    inv = minimal(tmp_path, model="glm-5.3-flash", engine="vllm", hardware="b200", runtime="container",
                  topology="disagg", deployment="d2")
    planned = planning.load(str(inv))
    workers = [s for s in planned.plan.services if s.role in ("prefill", "decode")]
    assert len(workers) == 2 and all(_overlay(s) for s in workers)
    view = planned.view()
    [host] = view["hosts"].values()
    paths = [f["path"] for f in host["workers"]["files"]]
    assert paths.count("/etc/glmops/d2/sitecustomize.py") == 1
    # each worker still lists the file it depends on (a change restarts both)
    deps = {s["name"]: s for s in view["services"] if s["role"] in ("prefill", "decode")}
    assert len(deps) == 2 and all("/etc/glmops/d2/sitecustomize.py" in str(s) for s in deps.values())
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["plan", "-i", str(inv), "--out", str(out)])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_vllm_nixl_disaggregated_pool_with_pipeline_parallel_is_refused(tmp_path, role):
    # vllm#40674 (NixlConnector takes no pp > 1), vllm#45880 (push connector only, no decode-side PP)
    other = "decode" if role == "prefill" else "prefill"
    pools = {role: {"tp": 8, "pp": 2}, other: {"tp": 8}}
    inv = minimal(tmp_path, n_hosts=3, model="glm-5.3", engine="vllm", hardware="h200", runtime="venv",
                  topology="disagg", speculative={"method": "none"}, topologies={"disagg": {"pools": pools}},
                  host={"glmops_rdma_devices": ["mlx5_0"]})
    code, lines = validate(inv)
    assert code == 2
    assert [ln.split("]")[0].strip() for ln in lines if ln.strip().startswith("[")] == ["[ENGINE_COMBINATION"], lines
    found = [ln for ln in lines if "[ENGINE_COMBINATION]" in ln]
    assert len(found) == 1 and f"{role} pp 2 over nixl on vLLM" in found[0], lines
    assert "vllm-project/vllm/issues/40674" in found[0] and "accepted: pp 1 on the prefill and decode pools" in found[0]
    assert f"glmops_topologies.disagg.pools.{role}.pp" in found[0]
    pools[role]["pp"] = 1
    inv = minimal(tmp_path, name="pp1", n_hosts=3, model="glm-5.3", engine="vllm", hardware="h200", runtime="venv",
                  topology="disagg", speculative={"method": "none"}, topologies={"disagg": {"pools": pools}},
                  host={"glmops_rdma_devices": ["mlx5_0"]})
    code, lines = validate(inv)
    assert code == 0, lines


def test_trtllm_moe_backend_outside_the_seeds_list_is_refused_for_flash_fp8_on_b200(tmp_path):
    # seed 000 lines 74-80: "Supported moe_backend ... B200/GB200 FP8 TRTLLM, DEEPGEMM" (line 189: "Use AUTO
    # (resolves to TRTLLM) or DEEPGEMM on B200"); the list is read from the seed's table, not retyped
    text = seed("000")
    table = text[text.index("Supported moe_backend"):text.index("On B200, the default moe_config.backend")]
    supported = [w.strip() for w in table.split("FP8", 1)[1].strip().split(",")]
    assert supported == ["TRTLLM", "DEEPGEMM"]
    for backend, ok in (("CUTLASS", False), ("WIDEEP", False), ("AUTO", True), *((b, True) for b in supported)):
        inv = minimal(tmp_path, name=f"moe-{backend.lower()}", model="glm-5.3-flash", engine="trtllm", hardware="b200",
                      runtime="venv", engine_config={"moe_config": {"backend": backend}})
        code, lines = validate(inv)
        out = "\n".join(lines)
        assert (code == 0) is ok, (backend, out)
        if not ok:
            assert "[ENGINE_COMBINATION]" in out and f"moe_config.backend '{backend}'" in out, out
            assert "accepted: AUTO, TRTLLM, DEEPGEMM" in out and "seeds/000_02b3db4c668ba297.txt lines 74-80" in out, out


SEED_002 = "seeds/002_5e664c6e94ff2f6a.txt"


def _seed_line(text: str, starts: str) -> tuple[int, str]:
    """(1-based number, text after the bullet) of the seed's line that starts with ``starts``."""
    [(n, line)] = [(i, ln) for i, ln in enumerate(text.splitlines(), 1) if ln.lstrip("• ").startswith(starts)]
    return n, line.lstrip("• ")


@pytest.mark.parametrize("gv,warned", [
    ({"engine": "vllm", "hardware": "b200", "runtime": "venv"}, True),
    ({"engine": "vllm", "hardware": "h200", "runtime": "venv"}, True),                  # Hopper: the seed's floor
    ({"engine": "dynamo", "dynamo_backend": "vllm", "hardware": "b200", "runtime": "venv"}, True),
    ({"engine": "vllm", "hardware": "b200", "runtime": "container"}, False),            # the seed's docker image
    ({**SGLANG}, False),                                                                   # not vLLM
])
def test_glm53_flash_on_vllm_from_a_venv_warns_that_the_seed_says_docker(tmp_path, gv, warned):
    """Seed 002's prerequisites: vLLM "use docker before the integration is included in the public
    repo", FlashInfer 0.6.17 or newer; an independent audit found a venv plan said nothing."""
    text = seed("002")
    docker_n, docker = _seed_line(text, "vLLM: ")
    docker = docker.split(": ", 1)[1]
    fi_n, fi = _seed_line(text, "FlashInfer: ")
    planned = planning.load(str(minimal(tmp_path, **{"model": "glm-5.3-flash", **gv})))
    found = [w for w in planned.warnings if w.code == "RECIPE_NOT_RENDERED" and "use docker" in w.message]
    assert bool(found) == warned, planned.warnings
    if warned:
        msg = found[0].message + " " + found[0].hint
        assert f'"{docker}"' in msg and f"line {docker_n}" in msg and SEED_002 in msg
        assert f'"{fi}"' in msg and f"line {fi_n}" in msg and "glmops_runtime: container" in msg
        fi_min = re.search(r"FlashInfer: (\d+\.\d+\.\d+)", fi).group(1)
        assert f"FlashInfer >= {fi_min}" in msg
        code, lines = validate(minimal(tmp_path, name="strict", **{"model": "glm-5.3-flash", **gv}), "--strict")
        assert code == 2 and any("RECIPE_NOT_RENDERED" in ln for ln in lines)


def test_the_lab_inventory_on_its_cpu_stand_in_is_not_warned():
    # inventories/lab: glm-5.3-flash on vLLM from a venv, hardware cpu (a tiny model; seed 002 line 7 names
    # Hopper and newer GPUs, which the entry matches on)
    planned = planning.load("inventories/lab")
    assert not [w for w in planned.warnings if "use docker" in w.message]
