"""Issue 14 items 5 and 8 from minimal inventories (as tests/unit/test_minimal_defaults.py writes them):
input modalities per serving path, and the seed 001 part glmops records as not rendered
(catalog ``engines.<engine>.compat``, glmops/engines/compat.py).

Sources: seeds/001_45b716f972606a07.txt line 149 ("Disaggregated workers ... support text and image
input only"), line 151 ("Video input is unavailable in the SGLang disaggregated recipe"), line 206 (input
modalities), lines 24 and 203 ("Mooncake over NVLink with MNNVL")."""
from __future__ import annotations

from click.testing import CliRunner
from test_minimal_defaults import minimal

from glmops import planning
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


def test_gb200_sglang_disaggregated_warns_that_the_mooncake_nvlink_env_is_not_rendered(tmp_path):
    planned = planning.load(str(minimal(tmp_path, n_hosts=3, topology="disagg", **SGLANG)))
    (w,) = [w for w in planned.warnings if w.code == "RECIPE_NOT_RENDERED"]
    assert "Mooncake KV transfer over NVLink with MNNVL" in w.message and SEED_001 in w.message
    assert "line 203" in w.message and "names the transport but no environment variable" in w.message
    agg = planning.load(str(minimal(tmp_path, name="agg", **SGLANG)))   # no KV transfer on one worker
    assert not [w for w in agg.warnings if w.code == "RECIPE_NOT_RENDERED"]

