"""The one exception type for errors a user can cause and fix."""


class BertwbError(Exception):
    """A user-facing error: the CLI prints it as one line and exits with code 1.

    The message names the file, line or key at fault and says how to fix it.
    """
