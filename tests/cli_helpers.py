"""Running the command line inside the test process, for the report tests."""

import contextlib
import io

from npusim import cli


def run_cli(*argv) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``npusim argv`` in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()
