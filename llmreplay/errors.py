"""The one exception for user mistakes: bad files, flags, traces or server answers.

The CLI turns it into one line on stderr and exit status 2; nothing else may.
"""


class BadInput(Exception):
    """A user-facing error; the message names what is wrong and where (file, column, row)."""


def first_line(exc: BaseException) -> str:
    """What a library's exception says, in one line (its type name when it says nothing)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
