"""What an LLVM CPU model name says of the code compiled for it: any platform whose devices report
the model their compiler targets (DeviceInfo.compiler_cpu; PoCL's, pocl_cpu.py) reads it here."""

from __future__ import annotations

#: LLVM CPU models (LLVM 15's and later ones') with AVX-512 F/CD/BW/DQ/VL: a CPU device compiling for
#: one of them runs 16-float vectors in one register.
AVX512_MODELS = frozenset(
    "skx skylake-avx512 cascadelake cooperlake cannonlake icelake-client icelake-server tigerlake rocketlake "
    "sapphirerapids emeraldrapids graniterapids graniterapids-d znver4 znver5 x86-64-v4".split()
)

#: LLVM CPU models with AVX512-VNNI (LLVM's target features of each): code compiled for one of them
#: may call ``__builtin_ia32_vpdpbusd512``, 16 lanes of four u8 x s8 products summed into int32.
VNNI_MODELS = frozenset(
    "cascadelake cooperlake icelake-client icelake-server tigerlake rocketlake sapphirerapids emeraldrapids "
    "graniterapids graniterapids-d znver4 znver5".split()
)

#: LLVM CPU models with AVX512-VBMI: code compiled for one of them may call
#: ``__builtin_ia32_vpermi2varqi512``, 64 bytes each looked up in a 128-byte table.
BYTE_PERMUTE_MODELS = frozenset(
    "cannonlake icelake-client icelake-server tigerlake rocketlake sapphirerapids emeraldrapids graniterapids "
    "graniterapids-d znver4 znver5".split()
)


def byte_lookup(compiler_cpu: str) -> bool:
    """Does code compiled for ``compiler_cpu`` look bytes up in a table 64 at a time (AVX512-VBMI)?
    False where no model is known."""
    return compiler_cpu in BYTE_PERMUTE_MODELS


def int8_dot(compiler_cpu: str) -> bool:
    """Does code compiled for ``compiler_cpu`` (DeviceInfo.compiler_cpu) have the 16-lane u8 x s8
    dot product (AVX512-VNNI)? False where no model is known."""
    return compiler_cpu in VNNI_MODELS


def vector_floats(compiler_cpu: str) -> int:
    """Floats per vector register of code compiled for ``compiler_cpu`` (DeviceInfo.compiler_cpu):
    16 for an AVX-512 model, else 8 (AVX2; also the value where no model is known)."""
    return 16 if compiler_cpu in AVX512_MODELS else 8


def device_vector_floats(is_gpu: bool, compiler_cpu: str) -> int:
    """Floats per vector register of a device's code: 8 on GPUs, else ``vector_floats``."""
    return 8 if is_gpu else vector_floats(compiler_cpu)


def program_key(device_key: str, compiler_cpu: str) -> str:
    """``device_key`` with the CPU model the device compiles for, where one is known: programs
    compiled for one model are never taken for another's."""
    return f"{device_key}|{compiler_cpu}" if compiler_cpu else device_key
