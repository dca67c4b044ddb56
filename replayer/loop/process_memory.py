"""Peak resident memory of the calling process, for run.json and the benchmark.

`ru_maxrss` is wrong for our spawned processes: Linux carries the forking parent's high-water
mark across exec, so every worker would report at least the coordinator's size. VmHWM is the
process's own peak.
"""

from __future__ import annotations

import resource


def peak_rss_mb() -> float:
    """This process's peak RSS in MB (VmHWM on Linux, ru_maxrss elsewhere)."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)  # kB
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
