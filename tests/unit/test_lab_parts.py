"""Fast tests of the lab's pure parts: names, addresses, apt source parsing, preflight errors,
inventory shape. No root, no nspawn."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from glmops.lab import core, image, profiles, spec
from glmops.lab.cli import lab as lab_cli


def test_bridge_name_fits_ifnamsiz_and_long_names_do_not_collide():
    assert spec.bridge_name("glmops") == "glmlab-glmops"
    a, b = spec.bridge_name("mol-systemd-unit"), spec.bridge_name("mol-systemd-other")
    assert len(a) <= 15 and len(b) <= 15
    assert a != b
    assert a.startswith("glmlab-")


def test_host_addresses_follow_the_convention():
    gw, addrs = spec.host_addresses("10.77.0.0/24", 3)
    assert gw == "10.77.0.1"
    assert addrs == ["10.77.0.11", "10.77.0.12", "10.77.0.13"]
    assert [spec.host_name(i) for i in (1, 2, 3)] == ["lab-1", "lab-2", "lab-3"]


@pytest.mark.parametrize("subnet", ["10.77.0.5/24", "nonsense", "10.77.0.0/29"])
def test_host_addresses_reject_bad_subnets(subnet):
    with pytest.raises(ValueError):
        spec.host_addresses(subnet, 3)


def test_bind_parse():
    assert spec.Bind.parse("/a:/b") == spec.Bind("/a", "/b", True)
    assert spec.Bind.parse("/a:/b:rw") == spec.Bind("/a", "/b", False)
    assert spec.Bind.parse("/a:/b:rw").nspawn_arg() == "--bind=/a:/b"
    assert spec.Bind.parse("/a:/b").nspawn_arg() == "--bind-ro=/a:/b"
    for bad in ("/a", "a:/b", "/a:/b:x", "/a:/b:ro:x"):
        with pytest.raises(ValueError, match="--bind"):
            spec.Bind.parse(bad)


def test_default_binds_only_existing(tmp_path, monkeypatch):
    monkeypatch.setenv("GLMOPS_CACHE_DIR", str(tmp_path))
    assert spec.default_binds() == []
    (tmp_path / "wheelhouse").mkdir()
    assert spec.default_binds() == [spec.Bind(str(tmp_path / "wheelhouse"), "/opt/glmops/wheelhouse")]


def test_check_name():
    assert spec.check_name("glmops") == []
    assert spec.check_name("mol-systemd-unit") == []
    for bad in ("", "Bad", "-x", "a_b", "x" * 40):
        assert spec.check_name(bad), bad


def test_apt_mirror_from_deb822(tmp_path, monkeypatch):
    monkeypatch.delenv("GLMOPS_LAB_MIRROR", raising=False)
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text(
        "Types: deb\n# a comment: with colon\nURIs: http://mirror.invalid/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n\n"
        "Types: deb-src deb\nURIs: http://mirror.invalid/debian http://other.invalid/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n")
    assert image.apt_mirror("bookworm", etc=tmp_path) == "http://mirror.invalid/debian"


def test_apt_mirror_from_one_line_list(tmp_path, monkeypatch):
    monkeypatch.delenv("GLMOPS_LAB_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# deb http://no.invalid/debian bookworm main\n"
        "deb [signed-by=/x.gpg] http://mirror.invalid/debian bookworm main\n")
    assert image.apt_mirror("bookworm", etc=tmp_path) == "http://mirror.invalid/debian"
    with pytest.raises(image.ImageError, match="no apt source for suite 'trixie'"):
        image.apt_mirror("trixie", etc=tmp_path)


def test_image_key_depends_on_package_list():
    assert image.image_key("bookworm", ("a", "b")) == image.image_key("bookworm", ("b", "a"))
    assert image.image_key("bookworm", ("a",)) != image.image_key("bookworm", ("a", "b"))
    assert image.image_key("bookworm", ("a",)) != image.image_key("trixie", ("a",))


def test_root_problem_names_sudo():
    assert core.root_problem(euid=0) == []
    (msg,) = core.root_problem(euid=1000)
    assert "needs root" in msg and "sudo" in msg


def test_missing_tools_name_their_package(monkeypatch):
    monkeypatch.setattr(core.shutil, "which", lambda t: None if t in ("systemd-nspawn", "debootstrap") else "/bin/x")
    problems = core.tool_problems(need_debootstrap=True)
    assert any("systemd-nspawn" in p and "apt-get install -y systemd-container" in p for p in problems)
    assert any("debootstrap" in p and "apt-get install -y debootstrap" in p for p in problems)
    assert not any("debootstrap" in p for p in core.tool_problems(need_debootstrap=False))


def test_preflight_reports_every_problem_at_once(monkeypatch, tmp_path):
    monkeypatch.setattr(spec, "STATE_ROOT", tmp_path)
    _, problems = core.preflight("Bad_Name", 0, "a100-sim", "10.77.0.0/24", [spec.Bind("/nonexistent", "/x")],
                                 euid=1000)
    text = "\n".join(problems)
    assert "needs root" in text
    assert "--name 'Bad_Name'" in text
    assert "--profile 'a100-sim'" in text and "cpu, b200-sim, h200-sim" in text
    assert "--hosts 0" in text
    assert "/nonexistent is not a directory" in text


def test_cli_not_root_exits_2_and_makes_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(spec, "STATE_ROOT", tmp_path / "state")
    res = CliRunner().invoke(lab_cli, ["up", "--hosts", "2", "--name", "t1", "--no-default-binds"])
    assert res.exit_code == 2
    assert "needs root" in res.output
    assert not (tmp_path / "state").exists()
    res = CliRunner().invoke(lab_cli, ["down", "--name", "t1"])
    assert res.exit_code == 2 and "needs root" in res.output


def test_cli_rejects_bad_bind_before_anything():
    res = CliRunner().invoke(lab_cli, ["up", "--bind", "relative:/x"])
    assert res.exit_code == 2
    assert "--bind 'relative:/x'" in res.output


def test_inventory_shape_for_sim_profile(tmp_path, monkeypatch):
    monkeypatch.setattr(spec, "STATE_ROOT", tmp_path)
    gw, addrs = spec.host_addresses("10.77.3.0/24", 2)
    st = spec.LabState(name="inv", profile="b200-sim", subnet="10.77.3.0/24", gateway=gw,
                       bridge=spec.bridge_name("inv"), nft_table=spec.nft_table("inv"), image="x",
                       hosts=[spec.HostState(spec.host_name(i), i, addrs[i - 1], f"inv-lab-{i}", str(tmp_path))
                              for i in (1, 2)])
    (tmp_path / "inv").mkdir()
    inv = yaml.safe_load(core.write_inventory(st).read_text())
    hosts = inv["all"]["children"]["lab"]["hosts"]
    assert list(hosts) == ["lab-1", "lab-2"]
    h = hosts["lab-2"]
    assert h["ansible_host"] == "10.77.3.12"
    assert h["ansible_user"] == "root"
    assert h["ansible_ssh_private_key_file"] == str(tmp_path / "inv" / "id_ed25519")
    assert h["ansible_python_interpreter"] == "/usr/bin/python3"
    assert h["glmops_hardware"] == "b200" and h["glmops_gpus"] == list(range(8))
    st.profile = "cpu"
    inv = yaml.safe_load(core.write_inventory(st).read_text())
    assert "glmops_hardware" not in inv["all"]["children"]["lab"]["hosts"]["lab-1"]


def test_lab_state_roundtrip(tmp_path, monkeypatch):
    monkeypatch.setattr(spec, "STATE_ROOT", tmp_path)
    (tmp_path / "rt").mkdir()
    st = spec.LabState(name="rt", profile="cpu", subnet="10.77.0.0/24", gateway="10.77.0.1", bridge="b",
                       nft_table="t", image="i", hosts=[spec.HostState("lab-1", 1, "10.77.0.11", "rt-lab-1", "/d")],
                       binds=[spec.Bind("/a", "/b")])
    st.save()
    assert spec.LabState.load("rt") == st


def test_sim_profiles_match_the_double():
    assert set(profiles.PROFILES) == set(spec.PROFILES)
    double = profiles.nvsmi_double_path()
    if not double.is_file():
        pytest.skip(f"nvidia-smi double not present at {double}")
    import importlib.util

    mod_spec = importlib.util.spec_from_file_location("nvsmi", double)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    for p in profiles.PROFILES.values():
        if p.gpus:
            assert p.double_profile in mod.PROFILES
            assert mod.PROFILES[p.double_profile]["count"] == p.gpus


def _fake_sysctls(tmp_path, monkeypatch, fwd: str, inst: str, watches: str):
    from glmops.lab import netsetup

    files = {}
    for attr, value in (("IP_FORWARD", fwd), ("INOTIFY_INSTANCES", inst), ("INOTIFY_WATCHES", watches)):
        f = tmp_path / attr.lower()
        f.write_text(value + "\n")
        monkeypatch.setattr(netsetup, attr, f)
        files[attr] = f
    monkeypatch.setattr(netsetup, "RUN_DIR", tmp_path / "run")
    return netsetup, {k: (lambda f=f: f.read_text().strip()) for k, f in files.items()}


def test_host_settings_are_restored_by_the_last_lab_only(tmp_path, monkeypatch):
    ns, val = _fake_sysctls(tmp_path, monkeypatch, "0", "128", "65536")
    ns.host_settings_acquire("a")
    assert (val["IP_FORWARD"](), val["INOTIFY_INSTANCES"](), val["INOTIFY_WATCHES"]()) == ("1", "8192", "524288")
    ns.host_settings_acquire("b")
    ns.host_settings_release("a")
    assert val["IP_FORWARD"]() == "1" and val["INOTIFY_INSTANCES"]() == "8192"   # b still needs them
    ns.host_settings_release("a")                                                 # twice is harmless
    assert val["IP_FORWARD"]() == "1"
    ns.host_settings_release("b")
    assert (val["IP_FORWARD"](), val["INOTIFY_INSTANCES"](), val["INOTIFY_WATCHES"]()) == ("0", "128", "65536")
    assert list((tmp_path / "run").iterdir()) == []


def test_host_settings_never_lower_a_limit(tmp_path, monkeypatch):
    ns, val = _fake_sysctls(tmp_path, monkeypatch, "1", "100000", "1000000")
    ns.host_settings_acquire("a")
    assert (val["IP_FORWARD"](), val["INOTIFY_INSTANCES"](), val["INOTIFY_WATCHES"]()) == ("1", "100000", "1000000")
    ns.host_settings_release("a")
    assert (val["IP_FORWARD"](), val["INOTIFY_INSTANCES"](), val["INOTIFY_WATCHES"]()) == ("1", "100000", "1000000")


def test_host_settings_adopt_the_older_ip_forward_record(tmp_path, monkeypatch):
    ns, val = _fake_sysctls(tmp_path, monkeypatch, "1", "128", "65536")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "ip_forward.orig").write_text("0\n")      # written by an older lab up
    (tmp_path / "run" / "ip_forward.users").write_text("old\n")
    ns.host_settings_acquire("new")
    ns.host_settings_release("new")
    assert val["IP_FORWARD"]() == "1"                               # "old" still holds it
    ns.host_settings_release("old")
    assert val["IP_FORWARD"]() == "0"
    assert list((tmp_path / "run").iterdir()) == []

def test_bad_subnet_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(spec, "STATE_ROOT", tmp_path)
    _, problems = core.preflight("ok", 1, "cpu", "nonsense", [], euid=0)
    (p,) = [p for p in problems if "--subnet" in p]
    assert "'nonsense'" in p and "10.77.0.0/24" in p and "'auto'" in p


def test_cli_reports_every_flag_problem_at_once_before_preparing_anything(monkeypatch, tmp_path):
    """Name, profile, host count and subnet are refused together, before the serving kit
    (wheel sets, tiny model) or any network object is prepared."""
    from glmops.lab import kit

    monkeypatch.setattr(spec, "STATE_ROOT", tmp_path / "state")
    monkeypatch.setattr(kit, "prepare", lambda *a, **k: pytest.fail("the kit was prepared despite bad flags"))
    res = CliRunner().invoke(lab_cli, ["up", "--hosts", "0", "--subnet", "bogus", "--name", "BAD NAME",
                                       "--profile", "nope"])
    assert res.exit_code == 2, res.output
    for needle in ("--name 'BAD NAME'", "--profile 'nope': accepted: cpu, b200-sim, h200-sim", "--hosts 0",
                   "--subnet 'bogus'"):
        assert needle in res.output, res.output
    assert not (tmp_path / "state").exists()


def test_a_refused_lab_up_leaves_no_shared_dir_behind(monkeypatch, tmp_path):
    """The cpu kit makes <name>-shared before booting; when up is then refused (a taken subnet,
    found under the net lock), nothing of the lab stays."""
    from glmops.lab import kit

    monkeypatch.setattr(spec, "STATE_ROOT", tmp_path)

    def prepare(name, log):
        spec.shared_dir(name).mkdir(parents=True)
        return []

    def refuse(**kw):
        raise core.LabError(["--subnet 10.77.0.0/24: bridge address range already in use"])

    monkeypatch.setattr(kit, "prepare", prepare)
    monkeypatch.setattr(core, "up", refuse)
    monkeypatch.setattr(core, "root_problem", lambda euid=None: [])
    res = CliRunner().invoke(lab_cli, ["up", "--name", "t2"])
    assert res.exit_code == 1 and "already in use" in res.output, res.output
    assert not spec.shared_dir("t2").exists()


@pytest.mark.parametrize("name", ["..", "", ".", "a/../..", "ok\n", "BAD NAME"])
def test_lab_down_refuses_a_name_that_is_not_a_lab_name(monkeypatch, name):
    """The name becomes cgroup and state paths that down kills and removes: '..' would be the
    machine's root cgroup and /var/lib. Refused (exit 2) before any process or file is looked at."""
    monkeypatch.setattr(core.H, "cgroup_pids", lambda *a: pytest.fail("processes were looked up"))
    monkeypatch.setattr(core.shutil, "rmtree", lambda *a, **k: pytest.fail("something was removed"))
    with pytest.raises(core.LabError) as exc:
        core.down(name, log=lambda m: None)
    assert exc.value.exit_code == 2 and f"--name {name!r}" in "\n".join(exc.value.problems)
    res = CliRunner().invoke(lab_cli, ["down", "--name", name])
    assert res.exit_code == 2, res.output


def test_lab_names_with_a_trailing_newline_are_refused():
    assert spec.check_name("ok\n") and not spec.check_name("ok")


def test_lab_down_prints_stamped_progress_per_step_and_host(monkeypatch, tmp_path):
    """`lab down` says what it does while it does it, the way `lab up` does (HH:MM:SS, seconds since
    the start): the supervisor's SIGTERM, each host as its nspawn process exits, then every removal.
    The hosts are real processes (a shell standing in for the supervisor stops them one after the
    other on SIGTERM); mounts, cgroups and network are fakes."""
    import contextlib
    import re
    import signal
    import subprocess
    import threading
    import time

    monkeypatch.setattr(spec, "STATE_ROOT", tmp_path)
    monkeypatch.setattr(core, "root_problem", lambda euid=None: [])
    monkeypatch.setattr(core.H, "cgroup_dirs", lambda lab, host=None: [])
    monkeypatch.setattr(core.H, "mounts_under", lambda d: [str(d / "hosts/lab-1/root"), str(d / "hosts/lab-2/root")])
    monkeypatch.setattr(core.subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(argv, 0, "", ""))
    removed = []
    monkeypatch.setattr(core.netsetup, "net_lock", contextlib.nullcontext)
    monkeypatch.setattr(core.netsetup, "nat_down", removed.append)
    monkeypatch.setattr(core.netsetup, "bridge_down", removed.append)
    monkeypatch.setattr(core.netsetup, "host_settings_release", lambda name: None)
    guests = [subprocess.Popen(["sleep", "60"]) for _ in (1, 2)]
    sup = subprocess.Popen(["sh", "-c", f"trap 'kill {guests[1].pid}; sleep 0.3; kill {guests[0].pid}; exit 0' TERM; "
                                        "while :; do sleep 0.05; done"])
    try:
        hosts = []
        for i, guest in enumerate(guests, 1):
            hdir = tmp_path / "t3" / "hosts" / f"lab-{i}"
            hdir.mkdir(parents=True)
            (hdir / "nspawn.pid").write_text(str(guest.pid))
            hosts.append(spec.HostState(f"lab-{i}", i, f"10.77.9.1{i}", f"t3-lab-{i}", str(hdir)))
        st = spec.LabState(name="t3", profile="cpu", subnet="10.77.9.0/24", gateway="10.77.9.1",
                           bridge="glmlab-t3", nft_table="glmops_lab_t3", image="i", hosts=hosts,
                           supervisor_pid=sup.pid)
        st.save()
        time.sleep(0.2)  # the shell has set its trap
        for p in (*guests, sup):  # reap the children as they exit (as init reaps the real ones)
            threading.Thread(target=p.wait, daemon=True).start()
        res = CliRunner().invoke(lab_cli, ["down", "--name", "t3"])
    finally:
        for p in (*guests, sup):
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines and all(re.match(r"\d\d:\d\d:\d\d +\d+\.\d+s ", line) for line in lines), res.output
    said = [re.sub(r"^\S+ +\S+ ", "", line) for line in lines]
    assert said[0].startswith(f"stopping 2 host(s) (lab-1, lab-2): SIGTERM to the supervisor (pid {sup.pid})")
    assert re.fullmatch(r"lab-2 stopped \(\d+\.\d s\)", said[1]) and re.fullmatch(r"lab-1 stopped \(\d+\.\d s\)", said[2])
    assert said[3] == f"unmounting 2 mount(s) under {tmp_path / 't3'}"
    assert said[4] == "removing the bridge glmlab-t3 and the nft table glmops_lab_t3"
    # one line per host's tree (a fresh-user trial saw 75 s of silence while GBs of venvs went)
    assert said[5:8] == [f"removing {tmp_path / 't3' / 'hosts' / 'lab-1'}", f"removing {tmp_path / 't3' / 'hosts' / 'lab-2'}",
                         f"removing {tmp_path / 't3'}"]
    assert re.fullmatch(r"lab 't3' removed in \d+\.\d s", said[8]) and len(said) == 9
    assert removed == ["glmops_lab_t3", "glmlab-t3"] and not (tmp_path / "t3").exists()


def _lab(tmp_path, monkeypatch, name="nx", subnet="10.77.0.0/24", count=3, profile="cpu"):
    monkeypatch.setattr(spec, "STATE_ROOT", tmp_path)
    gw, addrs = spec.host_addresses(subnet, count)
    (tmp_path / name).mkdir()
    return spec.LabState(name=name, profile=profile, subnet=subnet, gateway=gw, bridge=spec.bridge_name(name),
                         nft_table=spec.nft_table(name), image="x",
                         hosts=[spec.HostState(spec.host_name(i), i, addrs[i - 1], f"{name}-lab-{i}", str(tmp_path))
                                for i in range(1, count + 1)])


def test_the_lab_inventory_goes_to_a_verb_as_lab_up_says(tmp_path, monkeypatch):
    """`lab up` prints for a lab no shipped inventory addresses: a directory holding its inventory.yml
    (a link) and a group_vars/all.yml with the deployment's variables is a glmops inventory. Its glmops_lab_* group vars are lab metadata
    (glmops.variables.LAB_VARIABLES) that validate accepts; a misspelt one is still UNKNOWN_KEY."""
    import shutil

    from glmops.cli import main
    from glmops.variables import HOST_VARIABLES, LAB_VARIABLES

    inv = core.write_inventory(_lab(tmp_path, monkeypatch))
    data = yaml.safe_load(inv.read_text())["all"]["children"]["lab"]
    written = {k for k in data["vars"] if k.startswith("glmops_")} | {
        k for hv in data["hosts"].values() for k in hv if k.startswith("glmops_")}
    assert written == set(LAB_VARIABLES) and not written & set(HOST_VARIABLES)
    mine = tmp_path / "mine"
    (mine / "group_vars").mkdir(parents=True)
    (mine / "inventory.yml").symlink_to(inv)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    shutil.copy(os.path.join(repo, "inventories", "lab", "group_vars", "all.yml"), mine / "group_vars" / "all.yml")
    res = CliRunner().invoke(main, ["validate", "-i", str(mine)])
    assert res.exit_code == 0 and "valid:" in res.output and "UNKNOWN_KEY" not in res.output, res.output
    inv.write_text(inv.read_text().replace("glmops_lab_profile:", "glmops_lab_profil:"))
    res = CliRunner().invoke(main, ["validate", "-i", str(mine)])
    assert res.exit_code == 2 and "[UNKNOWN_KEY]" in res.output and "'glmops_lab_profil'" in res.output, res.output
    assert "glmops_lab_name" not in res.output


def _readme_lab_up() -> tuple[dict, str]:
    """README.md's first command: the `glmops lab up` options it gives and the inventory it deploys with."""
    import re
    import shlex

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = open(os.path.join(repo, "README.md"), encoding="utf-8").read()
    line = next(x for x in text.splitlines() if "glmops lab up" in x and "glmops deploy -i" in x)
    up = shlex.split(line.split("glmops lab up", 1)[1].split("&&", 1)[0])
    opts = dict(zip(up[::2], up[1::2]))
    return opts, re.search(r"glmops deploy -i (\S+)", line).group(1)


def _state(name: str, count: int, profile: str, subnet: str = spec.DEFAULT_SUBNET) -> spec.LabState:
    gw, addrs = spec.host_addresses(subnet, count)
    return spec.LabState(name=name, profile=profile, subnet=subnet, gateway=gw, bridge=spec.bridge_name(name),
                         nft_table=spec.nft_table(name), image="x",
                         hosts=[spec.HostState(spec.host_name(i), i, addrs[i - 1], f"{name}-lab-{i}", "/d")
                                for i in range(1, count + 1)])


def test_lab_up_names_the_inventory_readme_deploys_with(monkeypatch):
    """README.md: `glmops lab up --hosts 3 --profile cpu --name glmops && glmops deploy -i inventories/lab`;
    `lab up` said to build a directory with a link to its own inventory.yml instead."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    monkeypatch.setattr(spec, "STATE_ROOT", Path("/var/lib/glmops-lab"))  # the shipped inventories' key
    monkeypatch.chdir(repo)
    opts, inventory = _readme_lab_up()
    assert opts == {"--hosts": "3", "--profile": "cpu", "--name": "glmops"} and inventory == "inventories/lab"
    st = _state(opts["--name"], int(opts["--hosts"]), opts["--profile"])
    assert core.inventory_hint(st) == (
        "deploy to it with a shipped inventory, as README.md does: glmops deploy -i inventories/lab "
        "(this lab also fits inventories/lab-dynamo, inventories/lab-dynamo-etcd)")
    # inventories/lab-b200sim's lab (its hosts.yml: `glmops lab up --hosts 1 --profile b200-sim`)
    assert core.inventory_hint(_state("glmops", 1, "b200-sim")) == (
        "deploy to it with a shipped inventory, as README.md does: glmops deploy -i inventories/lab-b200sim "
        "(this lab also fits inventories/lab-b200sim-sglang)")
    # `glmops lab up` with its defaults (one host) or another name: what inventories/lab needs, and the way out
    for st in (_state("glmops", 1, "cpu"), _state("other", 3, "cpu", "10.77.5.0/24"), _state("glmops", 3, "h200-sim")):
        hint = core.inventory_hint(st)
        assert hint.startswith("README.md's inventories/lab addresses the lab of "
                               "`glmops lab up --hosts 3 --profile cpu --name glmops` (10.77.0.11, 10.77.0.12, 10.77.0.13), "
                               f"not this one ({st.name}, {st.profile}, {st.hosts[0].address}"), hint
        assert f"key {st.dir / 'id_ed25519'}, or -i a directory holding a link to {st.dir / 'inventory.yml'}" in hint


def test_lab_up_without_a_checkout_names_its_own_inventory(tmp_path, monkeypatch):
    monkeypatch.setattr(spec, "STATE_ROOT", tmp_path)
    assert core.shipped_inventories(tmp_path) == []
    assert core.inventory_hint(_state("w", 1, "cpu"), root=tmp_path) == (
        f"glmops verbs (validate, deploy, ...): -i a directory holding a link to {tmp_path / 'w' / 'inventory.yml'} "
        "and a group_vars/all.yml naming glmops_model, glmops_engine, glmops_hardware")
