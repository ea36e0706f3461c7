"""The GPU harness's payload planning (benchmarks/gpu/payload.py) without a GPU or network."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_payload", ROOT / "benchmarks" / "gpu" / "payload.py")
payload = importlib.util.module_from_spec(_spec)
sys.modules["gpu_payload"] = payload
_spec.loader.exec_module(payload)
MIB = payload.MIB


def test_parts_fit_one_transfer_next_to_the_working_tree():
    total, tree = 202_342_400, int(4.3 * MIB)
    parts = payload.plan_parts(total, tree_bytes=tree)
    assert len(parts) == 4
    assert sum(p.size for p in parts) == total
    assert all(p.size + tree + 2 * MIB <= 64 * MIB for p in parts)
    assert [p.offset for p in parts] == [sum(q.size for q in parts[:i]) for i in range(len(parts))]
    assert [p.name for p in parts] == ["part-01", "part-02", "part-03", "part-04"]


def test_parts_are_even_so_no_call_carries_a_crumb():
    parts = payload.plan_parts(100 * MIB, tree_bytes=10 * MIB, limit_bytes=64 * MIB)
    assert len(parts) == 2 and max(p.size for p in parts) - min(p.size for p in parts) <= 1


def test_a_small_payload_is_one_part_and_nothing_is_none():
    assert len(payload.plan_parts(5 * MIB, tree_bytes=MIB)) == 1
    assert payload.plan_parts(0, tree_bytes=MIB) == []


def test_a_tree_that_fills_the_transfer_is_refused_in_words():
    with pytest.raises(ValueError, match="leaves no room"):
        payload.plan_parts(10 * MIB, tree_bytes=63 * MIB)


def test_slimming_drops_what_hopper_never_loads_and_keeps_what_it_does():
    assert payload.slim_member("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so")
    assert payload.slim_member("vllm/third_party/deep_gemm/_C.cpython-311-x86_64-linux-gnu.so")
    assert payload.slim_member("vllm/third_party/fmha_sm100/cutlass/include/cute/a.hpp")
    assert not payload.slim_member("vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so")
    assert not payload.slim_member("vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so")
    assert not payload.slim_member("vllm/_C_stable_libtorch.abi3.so")


def test_requirements_follow_the_target_python_and_the_extras_asked_for():
    lines = ['fastapi[standard]>=0.1', 'numba==0.65; python_version < "3.14"', 'pywin32; sys_platform == "win32"',
             'rich; extra == "cli"', 'triton; platform_machine == "x86_64"']
    names = [r.name for r in payload.requirements_to_follow(lines, extras=())]
    assert names == ["fastapi", "numba", "triton"]
    with_cli = [r.name for r in payload.requirements_to_follow(lines, extras=("cli",))]
    assert "rich" in with_cli


def test_the_image_list_and_what_is_not_carried_are_names():
    names = payload.read_names(ROOT / "benchmarks" / "gpu" / "image_packages.txt")
    assert {"torch", "transformers", "numpy", "psutil"} <= names
    assert "vllm" not in names and "fastapi" not in names
    assert "flashinfer-python" in payload.NOT_CARRIED


def test_pins_narrow_what_pip_is_asked_for():
    from packaging.requirements import Requirement

    assert payload.pinned(Requirement("xgrammar<1.0.0,>=0.2.1")) in ("xgrammar<0.2.8,<1.0.0,>=0.2.1",
                                                                       "xgrammar<1.0.0,<0.2.8,>=0.2.1",
                                                                       "xgrammar>=0.2.1,<1.0.0,<0.2.8")
    assert payload.pinned(Requirement("fastapi[standard]>=0.1; python_version >= '3.9'")) == "fastapi>=0.1"


def test_an_inconsistent_set_is_found_before_it_travels(tmp_path):
    import zipfile

    def wheel(name, version, *requires):
        path = tmp_path / f"{name}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as z:
            meta = f"Name: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
            z.writestr(f"{name}-{version}.dist-info/METADATA", meta + "\nbody\n")
        return path

    chosen = {"vllm": wheel("vllm", "0.26.0", "apache-tvm-ffi==0.1.10", "torch==2.11.0"),
              "apache-tvm-ffi": wheel("apache_tvm_ffi", "0.1.10"),
              "xgrammar": wheel("xgrammar", "0.2.9", "apache-tvm-ffi>=0.1.15")}
    problems = payload.conflicts(chosen, {"torch"})
    assert problems == ["xgrammar needs apache-tvm-ffi>=0.1.15, but apache-tvm-ffi 0.1.10 was chosen"]


def test_the_app_needs_its_own_declared_dependencies_there(tmp_path):
    wanted = {payload.canonicalize_name(payload.Requirement(r).name) for r in payload.app_requirements()}
    assert {"pyflakes", "mcp", "httpx", "gguf"} <= wanted  # pyflakes was once missing from a hand copy
    assert not wanted & payload.HEADLESS_SKIP
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["newthing>=1", "old; python_version < \'3.12\'", "qasync"]\n')
    assert payload.app_requirements(pyproject) == ["newthing>=1", "gguf"]
