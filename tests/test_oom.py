"""The command line's address-space limit: an allocation past it is one line, exit 2, where
the kernel's out-of-memory killer would end the process with no word."""

import resource
import subprocess
import sys

import pytest
from dse_helpers import env

from npusim import oom
from npusim.errors import InputError

STATUS = "Name:\tpython\nVmPeak:\t  900000 kB\nVmSize:\t  800000 kB\nVmRSS:\t  300000 kB\n"
MEMINFO = ("MemTotal:       24683772 kB\nMemFree:         1000000 kB\n"
           "MemAvailable:   20000000 kB\nSwapTotal:       2000000 kB\n"
           "SwapFree:        1500000 kB\n")


def test_the_limit_is_what_the_process_maps_plus_what_the_machine_has_free():
    assert oom.free_limit(STATUS, MEMINFO) == (800000 + 20000000 + 1500000) * 1024
    assert oom.free_limit(STATUS, "MemTotal: 1 kB\n") is None  # an old kernel: no MemAvailable
    assert oom.free_limit("Name: x\n", MEMINFO) is None


@pytest.mark.parametrize(("text", "value"), [("8G", 8 << 30), ("512M", 512 << 20),
                                             ("1.5g", 3 << 29), ("2048KB", 2 << 20),
                                             ("1073741824", 1 << 30)])
def test_npusim_max_memory_reads_bytes_and_binary_units(text, value):
    assert oom.parse(text) == value


@pytest.mark.parametrize("text", ["lots", "12T", "-4G", "100K", "nan"])
def test_a_bad_npusim_max_memory_names_the_variable(text):
    with pytest.raises(InputError, match=rf"NPUSIM_MAX_MEMORY='{text}': give bytes, or with K, "
                                         "M or G"):
        oom.parse(text)


def _capped(*env_items, before=None) -> str:
    """``oom.cap`` in a fresh process (``before``: a soft limit set first): its result and the
    limit then in force."""
    first = "" if before is None else f"resource.setrlimit(resource.RLIMIT_AS, ({before}, -1)); "
    code = (f"import resource, sys; from npusim import oom; {first}"
            f"print(oom.cap(dict({', '.join(env_items)})), "
            "resource.getrlimit(resource.RLIMIT_AS)[0])")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env(), check=True).stdout.split()


def test_a_lower_limit_is_kept_and_off_sets_none():
    assert _capped("NPUSIM_MAX_MEMORY='4G'") == [str(4 << 30)] * 2
    assert _capped("NPUSIM_MAX_MEMORY='64G'", before=3 << 30) == [str(3 << 30)] * 2
    assert _capped("NPUSIM_MAX_MEMORY='off'") == ["None", str(resource.RLIM_INFINITY)]


def test_a_command_past_its_memory_is_one_line_exit_2():
    """tune-groups at 20000 pixels a side allocates arrays of hundreds of MiB."""
    r = subprocess.run([sys.executable, "-m", "npusim", "tune-groups", "edgetpu_v2_like",
                        "--size", "20000"], capture_output=True, text=True, timeout=300,
                       env={**env(), "NPUSIM_MAX_MEMORY": "1500M"})
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("npusim: error: out of memory: ") and r.stderr.count("\n") == 1
    assert r.stderr.endswith("try a smaller --size\n")
