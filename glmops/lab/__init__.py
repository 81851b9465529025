"""The lab: local systemd-nspawn hosts that stand in for GPU nodes."""
