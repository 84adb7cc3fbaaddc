"""The words the library and the command line both accept for a run's number type and mode.

Here, in a module that imports nothing, so that ``npusim``'s argument parser (which lists
them) is built without importing the simulator.
"""

DTYPES = ("float32", "int8")
"""Number types of a run: float32 arithmetic, or int8 with int32 accumulation."""
MODES = ("run", "estimate", "emulate")
"""How a run computes (``simulate.MODE_TABLE``): the machine's own arithmetic; the dense
engine with costs counted from masks; the cycle emulator."""
MAX_DIM = 2**20
"""The most of one layer dimension (pixels, channels, kernel rows) and of a batch: an arch
file's, a topology's and the command line's bound."""
