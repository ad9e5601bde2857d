"""The checkout, the shared models (``$DELEGATE_SHARED_DIR``, else ../shared) and their report names."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
SHARED = Path(os.environ.get("DELEGATE_SHARED_DIR", ROOT.parent / "shared"))
MODELS = SHARED / "models"
#: the folders of the shared models: float, trained ("real") and quantized
FOLDERS = ("", "real", "quant")


def importable() -> None:
    """Put the checkout first on sys.path: its ``delegate`` and its ``tests`` helpers (model builders)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def shared_models(folders: tuple[str, ...] = FOLDERS) -> list[Path]:
    """Every ``*.tflite`` of ``folders`` under the shared models, sorted."""
    return sorted(p for folder in folders for p in (MODELS / folder).glob("*.tflite"))


def model_name(model: Path) -> str:
    """A model's name in reports: its path under the shared models without the suffix, else its stem."""
    try:
        return model.relative_to(MODELS).with_suffix("").as_posix()
    except ValueError:
        return model.stem


def shared_model(name: str) -> Path:
    """``MODELS/<name>.tflite`` (``name`` as ``model_name`` gives it, e.g. ``real/foo``)."""
    return MODELS / f"{name}.tflite"
