"""glmops.bootstrap installs Debian packages with no service started meanwhile, and masks the
units of packages it installs for a command only (prometheus for promtool, docker-registry for
the lab's upstream registry): a fresh controller gets no Prometheus on :9090 or open registry
on :5000, now or at its next boot."""
from __future__ import annotations

from pathlib import Path

from glmops import bootstrap


def test_install_denies_service_starts_and_masks_binary_only_units(tmp_path, monkeypatch):
    seen = []

    def fake_run(cmd, **kw):
        policy = tmp_path / "usr/sbin/policy-rc.d"
        seen.append((cmd[1], policy.is_file() and "exit 101" in policy.read_text()))

    monkeypatch.setattr(bootstrap, "_run", fake_run)
    masked = bootstrap._install(["rsync", "prometheus", "docker-registry"], {}, root=tmp_path)
    assert seen == [("update", True), ("install", True)]
    assert not (tmp_path / "usr/sbin/policy-rc.d").exists()  # ours, removed after
    assert masked == ["prometheus.service", "docker-registry.service"]
    for unit in masked:
        link = tmp_path / "etc/systemd/system" / unit
        assert link.is_symlink() and str(link.readlink()) == "/dev/null"
    assert not (tmp_path / "etc/systemd/system/rsync.service").exists()


def test_install_keeps_the_machines_own_policy_and_units(tmp_path, monkeypatch):
    policy = tmp_path / "usr/sbin/policy-rc.d"
    policy.parent.mkdir(parents=True)
    policy.write_text("#!/bin/sh\nexit 0\n")
    unit = tmp_path / "etc/systemd/system/prometheus.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\nExecStart=/usr/bin/prometheus\n")
    monkeypatch.setattr(bootstrap, "_run", lambda cmd, **kw: None)
    bootstrap._install(["prometheus"], {}, root=tmp_path)
    assert policy.read_text() == "#!/bin/sh\nexit 0\n"
    assert not unit.is_symlink() and "ExecStart" in unit.read_text()


def test_a_failed_install_removes_our_policy(tmp_path, monkeypatch):
    import subprocess

    import pytest

    def failing(cmd, **kw):
        if cmd[1] == "install":
            raise subprocess.CalledProcessError(100, cmd)

    monkeypatch.setattr(bootstrap, "_run", failing)
    with pytest.raises(subprocess.CalledProcessError):
        bootstrap._install(["docker-registry"], {}, root=tmp_path)
    assert not (tmp_path / "usr/sbin/policy-rc.d").exists()
    assert not (tmp_path / "etc/systemd/system/docker-registry.service").exists()
    assert Path(bootstrap.__file__).is_file()
