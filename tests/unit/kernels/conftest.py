"""The kernel tests run Triton's interpreter on CPU. It must be switched on before triton is first
imported in this process (triton.language's own functions are defined at import), so it is set here,
when this directory is collected, whatever test module is collected first."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
