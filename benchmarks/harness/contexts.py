"""A model compiled as the delegate compiles it, and seeded float inputs for a ``Runtime``."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from delegate._integrity import unseal


def compiled_context(model: Path, options: list[str]) -> bytes:
    """The context the delegate compiles for ``model`` (one partition) with delegate ``options``
    (K=V), as ``python -m delegate run`` writes it into a temporary serialization folder."""
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "delegate", "run", str(model), "--serialization-dir", folder, "--json"]
        # a small model's partition would stay on CPU by default (cpu_when_faster): measure it anyway
        for option in ["cpu_when_faster=false", *options]:
            command += ["--option", option]
        subprocess.run(command, check=True, capture_output=True)
        (context,) = Path(folder).glob("*.ctx")
        return bytes(unseal(context.read_bytes(), str(context)))  # cache entries carry a SHA-256 trailer


def random_inputs(shapes: list[tuple[int, ...]], seed: int = 0) -> list[np.ndarray]:
    """Uniform [0, 1) float32 values of ``shapes`` from one generator seeded ``seed``."""
    rng = np.random.default_rng(seed)
    return [rng.random(s, dtype=np.float32) for s in shapes]
