"""Fresh Python processes that print one JSON line last, and a short account of why one failed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any


class ChildFailed(RuntimeError):
    """A child process exited with an error; ``reason`` is one line for a report."""

    def __init__(self, what: str, out: subprocess.CompletedProcess[str]) -> None:
        self.reason = failure(what, out)
        super().__init__(f"{self.reason}\n{out.stderr[-2000:]}")


def python_env(**overrides: str) -> dict[str, str]:
    """This process's environment with ``overrides``, keeping Python's bytecode cache on as an
    installed application has it (some sandboxes turn it off, which slows every start)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(overrides)
    return env


def run_json(
    args: list[str], what: str, env: dict[str, str] | None = None, python: str | Path | None = None, **kw: Any
) -> dict[str, Any]:
    """Run ``python ARGS`` (``-c CODE ...`` or a script) and return the JSON of its last stdout line;
    ``ChildFailed`` when it exits with an error."""
    command = [str(python or sys.executable), *args]
    out = subprocess.run(command, capture_output=True, text=True, env=python_env() if env is None else env, **kw)
    if out.returncode != 0:
        raise ChildFailed(what, out)
    return json.loads(out.stdout.strip().splitlines()[-1])


def failure(what: str, out: subprocess.CompletedProcess[str]) -> str:
    """One line saying how ``what`` failed: the signal that ended it, or its error message."""
    if out.returncode < 0:
        try:
            name = signal.Signals(-out.returncode).name
        except ValueError:
            name = f"signal {-out.returncode}"
        return f"{what} crashed ({name})"
    lines = out.stdout.strip().splitlines()
    if lines and lines[-1].startswith('{"error"'):
        message = json.loads(lines[-1])["error"]
    else:  # python -m delegate run: "error: ..." on stderr, after its progress line
        kept = [ln for ln in out.stderr.splitlines() if ln.strip() and not ln.startswith(("INFO:", "loading "))]
        message = " ".join(kept).removeprefix("error:").strip()
    message = " ".join(message.split())
    if len(message) > 200:
        message = message[:197] + "..."
    return f"{what} failed: {message or f'an empty error message (exit status {out.returncode})'}"


#: the child that times one interpreter (``invoke_child.py``, run as a script)
INVOKE_CHILD = Path(__file__).resolve().parent / "invoke_child.py"


def invoke_run(
    model: Path, kind: str, runs: int, options: dict[str, str], env: dict[str, str] | None = None, what: str = ""
) -> dict[str, Any]:
    """One fresh process timing ``model`` on ``kind`` (``delegate`` or ``xnnpack``; see invoke_child.py);
    ``what`` names it in a failure (default: the kind and the model)."""
    args = [str(INVOKE_CHILD), str(model), kind, str(runs), json.dumps(options)]
    return run_json(args, what or f"{kind} on {model.name}", env)
