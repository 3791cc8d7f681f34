"""Which x86 instruction sets llama.cpp is built for, read from the CPU that builds it, and a check at load time that
the build runs on this CPU.

llama-cpp-python compiles llama.cpp from source when it is installed. Built for the CPU it compiles on
(``-march=native``) it takes in its AMX kernels where the CPU reports AMX, and those crashed (SIGSEGV in
``ggml_backend_amx_mul_mat``) in a VM whose kernel does not grant AMX; built for AVX2 alone it leaves AVX-512 unused
where the CPU has it (prompt evaluation 1.32x faster with it on 2 cores of an AMD EPYC: ``docs/performance.md``).
So the Makefile builds it with each ggml option this CPU's ``/proc/cpuinfo`` flags allow, and never AMX:

    python3 src/drivetrain/models/cpu.py        # prints the CMAKE_ARGS (no import of drivetrain: run before install)

A build for more than the CPU has (a virtualenv or a wheel carried to another machine) dies of SIGILL at its first
matrix product; ``unsupported`` names what is missing first, so loading the model fails with a message instead.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# ggml's CMake option, the name llama_print_system_info() gives it, and the /proc/cpuinfo flag it needs
FEATURES: tuple[tuple[str, str, str], ...] = (
    ("GGML_AVX", "AVX", "avx"),
    ("GGML_AVX2", "AVX2", "avx2"),
    ("GGML_BMI2", "BMI2", "bmi2"),
    ("GGML_FMA", "FMA", "fma"),
    ("GGML_F16C", "F16C", "f16c"),
    ("GGML_AVX_VNNI", "AVX_VNNI", "avx_vnni"),
    ("GGML_AVX512", "AVX512", "avx512f"),
    ("GGML_AVX512_VBMI", "AVX512_VBMI", "avx512vbmi"),
    ("GGML_AVX512_VNNI", "AVX512_VNNI", "avx512_vnni"),
    ("GGML_AVX512_BF16", "AVX512_BF16", "avx512_bf16"),
)
FALLBACK = "-DGGML_NATIVE=OFF"  # where the flags cannot be read: ggml's defaults for x86 (AVX2), as before


def cpu_flags(cpuinfo: str) -> frozenset[str] | None:
    """The first processor's x86 flags in a /proc/cpuinfo text; None when it has none (another architecture)."""
    m = re.search(r"^flags\s*:(.*)$", cpuinfo, re.MULTILINE)
    return frozenset(m.group(1).split()) if m else None


def cmake_args(flags: frozenset[str] | None) -> str:
    """CMAKE_ARGS for llama-cpp-python's build: each ggml option on exactly when the CPU has its flag; AMX never."""
    if flags is None:
        return FALLBACK
    options = [f"-D{option}={'ON' if flag in flags else 'OFF'}" for option, _, flag in FEATURES]
    return " ".join(["-DGGML_NATIVE=OFF", *options])


def unsupported(system_info: str, flags: frozenset[str] | None) -> list[str]:
    """The instruction sets a llama.cpp build uses (its ``llama_print_system_info()``: "AVX512 = 1 | …") that the
    CPU does not have. None of them when the CPU's flags are unknown."""
    if flags is None:
        return []
    built = {name for name, on in re.findall(r"(\w+) = (\d)", system_info) if on == "1"}
    return [name for _, name, flag in FEATURES if name in built and flag not in flags]


def this_cpu() -> frozenset[str] | None:
    try:
        return cpu_flags(Path("/proc/cpuinfo").read_text())
    except OSError:
        return None


if __name__ == "__main__":
    sys.stdout.write(cmake_args(this_cpu()) + "\n")
