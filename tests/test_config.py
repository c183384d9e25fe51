"""RnicConfig: the one place a parameter's default lives. Validation errors name the parameter, the
JSON round trip and ``$RNIC_CONFIG`` give back the same configuration, build keys tell
configurations apart, and the README's table is the generated one."""

import argparse
import dataclasses
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rnic.model.config import ENV_VAR, RnicConfig, add_config_arguments, config_from_args
from rnic.model.qpc import QpcCacheConfig

ROOT = Path(__file__).resolve().parents[1]


def test_readme_table_is_generated():
    """The README's "Configuration" table is RnicConfig.markdown_table() (regenerate it with
    ``python -m rnic.model.config`` and paste it between the markers)."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- config-table:begin -->\n(.*?)<!-- config-table:end -->", text, re.S)
    assert m, "README.md has no config-table markers"
    assert m.group(1) == RnicConfig.markdown_table(), "README's configuration table is stale: see python -m rnic.model.config"


def test_every_field_is_in_the_table():
    table = RnicConfig.markdown_table()
    for f in dataclasses.fields(RnicConfig):
        if f.name == "qpc":
            for g in dataclasses.fields(QpcCacheConfig):
                assert f"| `qpc.{g.name}` |" in table
        else:
            assert f"| `{f.name}` | {getattr(RnicConfig(), f.name)} |" in table


@pytest.mark.parametrize("changes, message", [
    ({"width": 96}, "width must be 64, 128, 256 or 512, not 96"),
    ({"max_mtu": 1500}, "max_mtu must be 256, 512, 1024, 2048 or 4096 bytes, not 1500"),
    ({"max_qps": 100}, "max_qps must be a power of two from 2 to 2**24, not 100"),
    ({"max_qps": 1}, "max_qps must be a power of two"),
    ({"max_qps": 1 << 25}, "max_qps must be a power of two"),
    ({"window": 1}, "window must be 2..64, not 1"),
    ({"window": 65}, "window must be 2..64, not 65"),
    ({"wqe_prefetch": 0}, "wqe_prefetch must be 1..8, not 0"),
    ({"wqe_prefetch": 9}, "wqe_prefetch must be 1..8, not 9"),
    ({"payload_queue": 509}, "payload_queue must be at least 510 beats at width 64 and max_mtu 4096"),
    ({"desc_queue": 2}, "desc_queue must be at least 3, not 2"),
    ({"width": 64.0}, "width must be an integer, not 64.0"),
    ({"window": True}, "window must be an integer, not True"),
    ({"qpc": (16, 4)}, "qpc must be a QpcCacheConfig"),
])
def test_validation_names_the_parameter(changes, message):
    with pytest.raises(ValueError) as err:
        RnicConfig(**changes)
    assert message in str(err.value)


def test_payload_queue_bound_follows_width_and_mtu():
    assert RnicConfig(width=512, payload_queue=62).payload_queue == 62
    with pytest.raises(ValueError, match="payload_queue must be at least 62 beats at width 512"):
        RnicConfig(width=512, payload_queue=61)
    assert RnicConfig(max_mtu=256, payload_queue=30).payload_queue == 30


def test_replace_and_qpc_changes():
    c = RnicConfig().replace(width=128, qpc={"entries": 64})
    assert c.width == 128 and c.qpc == QpcCacheConfig(entries=64, ways=4, mshrs=4)
    assert RnicConfig().width == 64                              # frozen: the original is unchanged
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.width = 256
    with pytest.raises(ValueError, match="unknown configuration parameter"):
        RnicConfig().replace(colour=1)
    with pytest.raises(ValueError, match="unknown qpc parameter"):
        RnicConfig().replace(qpc={"colour": 1})
    with pytest.raises(ValueError, match="qpc.ways must be a power of two no larger than entries"):
        RnicConfig().replace(qpc={"entries": 2})


def test_json_round_trip():
    for c in (RnicConfig(), RnicConfig(width=256, max_mtu=1024, max_qps=1 << 24, window=8, wqe_prefetch=1,
                                       payload_queue=4096, desc_queue=3,
                                       qpc=QpcCacheConfig(entries=64, ways=64, tag_width=4, qpn_bits=10))):
        assert RnicConfig.from_json(c.to_json()) == c
        assert RnicConfig.from_dict(c.to_dict()) == c
    assert RnicConfig.from_json('{"width": 128}') == RnicConfig(width=128)     # the rest: defaults
    assert RnicConfig.from_json('{"qpc": {"ways": 2}}').qpc == QpcCacheConfig(ways=2, mshrs=4)
    for bad, message in (("[1]", "must be an object"), ("{", "configuration JSON"),
                         ('{"width": "64"}', "width must be an integer")):
        with pytest.raises(ValueError, match=message):
            RnicConfig.from_json(bad)


def test_from_env():
    assert RnicConfig.from_env({}) == RnicConfig()
    assert RnicConfig.from_env({ENV_VAR: ""}) == RnicConfig()
    c = RnicConfig(width=128, max_mtu=1024)
    assert RnicConfig.from_env(c.env()) == c
    assert list(c.env()) == [ENV_VAR]
    with pytest.raises(ValueError, match="max_mtu"):
        RnicConfig.from_env({ENV_VAR: '{"max_mtu": 1000}'})


def test_keys_name_configurations_apart():
    assert RnicConfig().key() == "default"
    assert RnicConfig(width=128, max_mtu=1024).key() == "w128-mtu1024"
    configs = [RnicConfig()]
    configs += [RnicConfig(width=w) for w in (128, 256, 512)]
    configs += [RnicConfig(max_mtu=m) for m in (256, 512, 1024, 2048)]
    configs += [RnicConfig(max_qps=q) for q in (2, 64, 1 << 24)]
    configs += [RnicConfig(window=w) for w in (2, 16, 64)]
    configs += [RnicConfig(wqe_prefetch=p) for p in (1, 4)]
    configs += [RnicConfig(payload_queue=p) for p in (512, 2048)]
    configs += [RnicConfig(desc_queue=d) for d in (3, 32)]
    configs += [RnicConfig().replace(qpc=q) for q in ({"entries": 8, "ways": 8}, {"entries": 8}, {"ways": 1},
                                                       {"tag_width": 4}, {"qpn_bits": 10})]
    configs += [RnicConfig(width=128, max_qps=64), RnicConfig(width=128, window=64)]
    keys = [c.key() for c in configs]
    assert len(set(keys)) == len(configs), keys
    assert all(re.fullmatch(r"[a-z0-9-]+", k) for k in keys)       # a folder name
    assert RnicConfig(width=128).key() == RnicConfig.from_json(RnicConfig(width=128).to_json()).key()


def test_derived_values():
    c = RnicConfig(width=128, max_mtu=1024, max_qps=64)
    assert (int(c.mtu), c.qps_log2, c.deep_below, c.beat_bytes) == (3, 6, 1024, 16)
    assert c.cache_qpc == QpcCacheConfig(qpn_bits=6, mshrs=4)
    assert RnicConfig().replace(qpc={"qpn_bits": 4}).cache_qpc.qpn_bits == 4


def test_command_line_overrides():
    p = argparse.ArgumentParser()
    add_config_arguments(p)
    assert config_from_args(p.parse_args([])) == RnicConfig()
    args = p.parse_args(["--width", "128", "--qp-cache", "2", "--max-qps", "64"])
    assert config_from_args(args) == RnicConfig(width=128, max_qps=64, qpc=QpcCacheConfig(entries=2, ways=2, mshrs=4))
    args = p.parse_args(["--config", '{"width": 256, "window": 8}', "--window", "16"])
    assert config_from_args(args) == RnicConfig(width=256, window=16)
    base = RnicConfig(max_mtu=1024)
    assert config_from_args(p.parse_args(["--width", "128"]), base) == RnicConfig(width=128, max_mtu=1024)
    assert "(default 64)" in p.format_help() and "(default 1024)" in p.format_help()


def test_no_defaults_elsewhere():
    """Rnic, EngineModel, expected() and run_workloads take the configuration, nothing of their own."""
    from rnic.hdl.rnic import Rnic
    from rnic.model.engine import EngineModel, HostMemory
    from rnic.sim.scenario import expected
    assert list(inspect.signature(Rnic.__init__).parameters) == ["self", "config"]
    assert list(inspect.signature(EngineModel.__init__).parameters) == ["self", "mem", "config", "settings"]
    assert list(inspect.signature(expected).parameters) == ["w", "config"]
    with pytest.raises(ValueError, match="config must be an RnicConfig"):
        EngineModel(HostMemory(), QpcCacheConfig())


def test_module_prints_the_table():
    r = subprocess.run([sys.executable, "-m", "rnic.model.config"], capture_output=True, text=True, timeout=60,
                       cwd=ROOT)
    assert r.returncode == 0 and r.stdout == RnicConfig.markdown_table()
    r = subprocess.run([sys.executable, "-m", "rnic.model.config", "--json", "--width", "128"], capture_output=True,
                       text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0 and RnicConfig.from_json(r.stdout) == RnicConfig(width=128)
