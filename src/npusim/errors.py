"""The project's one small exception hierarchy.

The library raises; it never prints an error or exits. Only ``cli`` turns an
``NpusimError`` into one line on stderr and exit code 2. Every message names
the file, layer or field at fault, its value, and what would be valid.
"""


class NpusimError(Exception):
    """Base of every error npusim raises on bad input."""


class LayerError(NpusimError):
    """A layer or op whose parameters do not fit together (names the layer and field)."""


class ConfigError(NpusimError):
    """A bad hardware description: unknown key, wrong type, impossible value."""


class ModelError(NpusimError):
    """A network that cannot be built, loaded or imported (bad name, file or op)."""


class InputError(NpusimError):
    """A bad input tensor or image file."""


class OutputError(NpusimError):
    """A file npusim was asked to write that it must not, or cannot, write (names the path)."""


class NpusimWarning(UserWarning):
    """Input npusim uses but that may not be what the user meant (an image much smaller
    than the model's input). The library warns; the CLI prints one line on stderr."""


def one_line(text: str, most: int = 300) -> str:
    """Another library's complaint (several lines, a long trace) as one line of at most
    about ``most`` characters: its start, which names the problem, and its end, which often
    says why."""
    said = " ".join(str(text).split())
    head = most * 2 // 5
    return said if len(said) <= most else f"{said[:head]} ... {said[head - most:]}"
