"""The one exception for user mistakes: bad files, flags, traces or server answers.

The CLI turns it into one line on stderr and exit status 2; nothing else may.
"""


class BadInput(Exception):
    """A user-facing error; the message names what is wrong and where (file, column, row)."""
