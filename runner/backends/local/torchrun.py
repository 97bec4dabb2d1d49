"""torchrun (torch.distributed.run), made to exit as soon as its workers are done.

`python -m runner.backends.local.torchrun ARGS` is `torchrun ARGS`, except that the objects
importing torch created are frozen out of the garbage collector before it starts: the final
collections of interpreter shutdown would otherwise walk all of them, which takes 0.5-1 s on
a busy machine, between the last worker's exit and the run's outcome being known.
"""

from __future__ import annotations

import gc

from torch.distributed.run import main

if __name__ == "__main__":
    gc.freeze()
    main()
