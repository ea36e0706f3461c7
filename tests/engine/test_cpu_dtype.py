"""The CPU engine's data type per host instruction set (no engine is started)."""

from workstation.core.profiles import Profile
from workstation.engine.cpu_dtype import cpu_flags, dtype_note, engine_dtype
from workstation.engine.launcher import cpu_kv_cache_bytes

from tests.engine.test_launcher_profiles import _flags, _launcher

NO_AVX512 = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma"  # the 2-core VM measured in cpu_dtype.py


def test_float32_only_on_x86_without_avx512_and_only_where_the_flags_are_known(tmp_path):
    assert engine_dtype(NO_AVX512.split(), "x86_64") == "float32"
    assert engine_dtype([*NO_AVX512.split(), "avx2"], "AMD64") == "float32"
    assert engine_dtype([*NO_AVX512.split(), "avx2", "avx512f", "avx512bw"], "x86_64") is None
    assert engine_dtype(["fp", "asimd", "bf16"], "aarch64") is None  # Arm: vLLM's own choice
    assert engine_dtype([], "x86_64") is None  # unknown flags: leave it to vLLM
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx fma\n\nprocessor\t: 1\nflags\t: fpu\n")
    assert cpu_flags(info) == {"fpu", "avx", "fma"}  # the first processor's
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_the_launcher_runs_a_cpu_engine_in_float32_there_and_says_so(tmp_path):
    launcher = _launcher(tmp_path, "cpu", host_dtype=lambda: "float32")
    flags = _flags(launcher)
    assert flags["--dtype"] == ["float32"] and launcher.chosen_dtype == "float32"
    assert "AVX-512" in dtype_note("float32") and "--dtype" in dtype_note("float32")
    # a profile's own --dtype wins, and the app then chose nothing
    own = Profile("mine", "bf16 on purpose", args=("--enforce-eager", "--dtype", "bfloat16"))
    mine = _launcher(tmp_path, "cpu", profile=own, host_dtype=lambda: "float32")
    assert _flags(mine)["--dtype"] == ["bfloat16"] and mine.chosen_dtype is None
    # the user's extra args too
    extra = _launcher(tmp_path, "cpu", host_dtype=lambda: "float32", extra_args=["--dtype", "half"])
    assert _flags(extra)["--dtype"] == ["half"] and extra.chosen_dtype is None
    # an AVX-512 host, or a CUDA engine: vLLM's own
    assert "--dtype" not in _flags(_launcher(tmp_path, "cpu", host_dtype=lambda: None))
    cuda = _launcher(tmp_path, "cuda", host_dtype=lambda: "float32")
    assert "--dtype" not in _flags(cuda) and cuda.chosen_dtype is None


def test_a_float32_engine_gets_twice_the_kv_bytes_by_default_not_where_the_user_set_them(monkeypatch):
    import psutil

    class _Memory:
        available = 64 << 30

    monkeypatch.setattr(psutil, "virtual_memory", lambda: _Memory())
    assert cpu_kv_cache_bytes(None) == 4 << 30
    assert cpu_kv_cache_bytes(None, bytes_per_value=4) == 8 << 30
    _Memory.available = 12 << 30  # a third of what is available caps both
    assert cpu_kv_cache_bytes(None, bytes_per_value=4) == 4 << 30
    assert cpu_kv_cache_bytes(0.5, bytes_per_value=4) == 512 << 20
