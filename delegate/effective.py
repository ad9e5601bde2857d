"""What an interpreter was configured to run with: the mapping of acceleration settings, or the
keyword options alone. Apart from the settings modules, so that an interpreter made from options
reports it without loading them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Effective:
    """What a settings message asks of this project: run with the delegate (``options``) or on CPU;
    for an interpreter made from keyword options alone, this delegate with those options."""

    #: "gpu" (this delegate), "cpu" (TFLite's default CPU path, XNNPACK included), "builtin"
    #: (TFLite's builtin kernels, no delegate at all) or "xnnpack"
    engine: str
    #: why it is not the GPU, when it is not
    reason: str = ""
    #: delegate options (strings, as load_delegate takes them) when engine == "gpu"
    options: dict[str, str] = field(default_factory=dict)
    #: threads for TFLite's CPU kernels (None: the runtime's default)
    num_threads: int | None = None
    compile_fallback: bool = False
    execution_fallback: bool = False
    priorities: tuple[str, str, str] = ("AUTO", "AUTO", "AUTO")
