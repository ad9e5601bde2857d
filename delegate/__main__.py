import os
import sys

from .cli import INTERRUPTED, main

status = main()
if status == INTERRUPTED:
    # Ctrl-C: a compile may still run inside the driver; leave without tearing the driver down
    # under it (and without waiting for it).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
sys.exit(status)
