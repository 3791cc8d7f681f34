"""llama.cpp built for the instruction sets this CPU has (models/cpu.py), and refused at load when built for more."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from drivetrain.errors import ConfigError
from drivetrain.models import cpu, local

ZEN4 = (
    "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 bmi2 fma f16c avx512f avx512dq avx512vbmi avx512_vnni avx512_bf16\n"
)
OLD = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 bmi2 fma f16c\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\n"
CPU_SCRIPT = Path(cpu.__file__)


def test_the_build_options_follow_the_cpu_flags_and_never_take_in_amx() -> None:
    zen4 = cpu.cmake_args(cpu.cpu_flags(ZEN4)).split()
    assert "-DGGML_NATIVE=OFF" in zen4
    assert {"-DGGML_AVX2=ON", "-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX512_BF16=ON"} <= set(zen4)
    assert "-DGGML_AVX_VNNI=OFF" in zen4  # the VEX form is a flag of its own, absent here
    old = cpu.cmake_args(cpu.cpu_flags(OLD)).split()
    assert "-DGGML_AVX2=ON" in old and "-DGGML_AVX512=OFF" in old and "-DGGML_AVX512_VBMI=OFF" in old
    assert not any("AMX" in arg for arg in zen4 + old)
    assert cpu.cpu_flags(ARM) is None and cpu.cmake_args(None) == "-DGGML_NATIVE=OFF"


def test_a_build_for_more_than_the_cpu_has_is_named() -> None:
    info = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | FMA = 1 | AVX512 = 1 | AVX512_VNNI = 1 | AVX_VNNI = 0 | REPACK = 1 |"
    assert cpu.unsupported(info, cpu.cpu_flags(OLD)) == ["AVX512", "AVX512_VNNI"]
    assert cpu.unsupported(info, cpu.cpu_flags(ZEN4)) == []
    assert cpu.unsupported(info, None) == []  # flags unknown: nothing is claimed


def test_the_script_the_makefile_runs_prints_only_what_this_cpu_has() -> None:
    out = subprocess.run([sys.executable, str(CPU_SCRIPT)], capture_output=True, text=True, check=True).stdout.split()
    flags = cpu.this_cpu()
    if flags is None:
        assert out == ["-DGGML_NATIVE=OFF"]
        return
    on = {arg.removeprefix("-D").removesuffix("=ON") for arg in out if arg.endswith("=ON")}
    assert on == {option for option, _, flag in cpu.FEATURES if flag in flags}


def test_the_installed_llama_cpp_runs_on_this_cpu() -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    assert cpu.unsupported(llama_cpp.llama_print_system_info().decode(), cpu.this_cpu()) == []


def test_loading_a_build_this_cpu_cannot_run_says_how_to_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("llama_cpp")
    monkeypatch.setattr(local, "this_cpu", lambda: frozenset({"sse2"}))  # a CPU without AVX2, which the build uses
    local._llama_class.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"built for AVX.*AVX2.*this CPU does not have.*--force-reinstall"):
            local._llama_class()
    finally:
        local._llama_class.cache_clear()
