import os

if "TANDEM_STOP_WITH_PARENT" in os.environ:  # started by `tandem up` (tandem/stack.py): stop when it is gone
    from tandem.parent import stop_with_parent

    stop_with_parent()

from tandem.cli import app  # noqa: E402

app()
