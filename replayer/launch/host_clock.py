"""This host's wall clock, measured: the kernel's own error bound (adjtimex), chrony's when it runs, and
the offset against a coordinator by the lowest-round-trip exchange; nothing here is assumed.

A read is cheap and bounded (a syscall, a 2 s chronyc, a few HTTP round trips): only before and after a run.
"""

from __future__ import annotations

import ctypes
import http.client
import json
import os
import shutil
import subprocess
import time
import urllib.parse
from dataclasses import asdict, dataclass

STA_UNSYNC = 0x0040
TIME_ERROR = 5
CLOCK_STATES = {
    0: "ok",
    1: "insert_leap",
    2: "delete_leap",
    3: "leap_in_progress",
    4: "leap_done",
    5: "error",
}
OFFSET_SAMPLES = 16
CHRONYC_TIMEOUT_S = 2.0


class _Timex(ctypes.Structure):
    """Linux `struct timex` (the field order and types of <sys/timex.h>; ctypes pads as the C ABI does)."""

    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("constant", ctypes.c_long),
        ("precision", ctypes.c_long),
        ("tolerance", ctypes.c_long),
        ("time_sec", ctypes.c_long),
        ("time_usec", ctypes.c_long),
        ("tick", ctypes.c_long),
        ("ppsfreq", ctypes.c_long),
        ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int),
        ("stabil", ctypes.c_long),
        ("jitcnt", ctypes.c_long),
        ("calcnt", ctypes.c_long),
        ("errcnt", ctypes.c_long),
        ("stbcnt", ctypes.c_long),
        ("tai", ctypes.c_int),
        ("_reserved", ctypes.c_int * 11),
    ]


@dataclass(frozen=True, slots=True)
class KernelClock:
    """adjtimex's view: `maxerror_us` bounds the clock's distance from true time (it grows by 500 ppm
    while no time daemon disciplines the clock); unsynchronized when the daemon has not set it."""

    state: str
    synchronized: bool
    maxerror_us: int
    esterror_us: int


@dataclass(frozen=True, slots=True)
class OffsetSample:
    """This host's clock minus the coordinator's, from the exchange with the lowest round trip;
    the true offset lies within `offset_ns` +- `rtt_ns / 2` (whatever the path's asymmetry)."""

    offset_ns: int
    rtt_ns: int
    samples: int

    @property
    def bound_ns(self) -> int:
        return abs(self.offset_ns) + self.rtt_ns // 2


def kernel_clock() -> KernelClock | None:
    """The kernel's clock state and error bounds; None where adjtimex is not available."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols: libc without ldconfig
        timex = _Timex()
        state = libc.adjtimex(ctypes.byref(timex))  # modes 0: read only
    except (OSError, AttributeError):
        return None
    if state < 0:
        return None
    synchronized = state != TIME_ERROR and not timex.status & STA_UNSYNC
    return KernelClock(CLOCK_STATES.get(state, str(state)), synchronized, timex.maxerror, timex.esterror)


def chrony_tracking() -> dict | None:
    """chronyc's tracking report (system time offset, root delay and dispersion) when chronyd answers."""
    chronyc = shutil.which("chronyc")
    if chronyc is None:
        return None
    try:
        done = subprocess.run(
            [chronyc, "-c", "tracking"],
            capture_output=True,
            text=True,
            timeout=CHRONYC_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    fields = done.stdout.strip().split(",")
    if done.returncode != 0 or len(fields) < 12:
        return None
    try:  # CSV: ref id, ref name, stratum, ref time, system time (s), last offset, rms offset, ..., root delay, root dispersion
        return {
            "reference": fields[1],
            "stratum": int(fields[2]),
            "system_time_offset_s": float(fields[4]),
            "root_delay_s": float(fields[10]),
            "root_dispersion_s": float(fields[11]),
        }
    except ValueError:
        return None


def offset_against(
    time_url: str, samples: int = OFFSET_SAMPLES, timeout_s: float = 2.0
) -> OffsetSample | None:
    """This clock minus the one behind `time_url` (a GET answering {"unix_ns": N}, as `llmreplay barrier`
    serves it), over one kept-alive connection; None when it does not answer."""
    parts = urllib.parse.urlsplit(time_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout_s)
    best: tuple[int, int] | None = None
    answered = 0
    try:
        for _ in range(samples):
            sent_mono, sent_wall = time.perf_counter_ns(), wall_ns()
            try:
                connection.request("GET", parts.path or "/time")
                response = connection.getresponse()
                remote = int(json.loads(response.read(4096))["unix_ns"])
            except (OSError, ValueError, KeyError, TypeError, http.client.HTTPException):
                connection.close()
                continue
            rtt = time.perf_counter_ns() - sent_mono
            answered += 1
            if best is None or rtt < best[1]:
                best = (sent_wall + rtt // 2 - remote, rtt)
    finally:
        connection.close()
    return None if best is None else OffsetSample(best[0], best[1], answered)


def wall_ns() -> int:
    """This host's wall clock. LLMREPLAY_TEST_CLOCK_SKEW_NS shifts it: a test hook that makes one process
    a host whose clock is off by that much (its start and its measured offset both move, as they would)."""
    return time.time_ns() + _SKEW_NS


_SKEW_NS = int(os.environ.get("LLMREPLAY_TEST_CLOCK_SKEW_NS", "0") or 0)


def clock_report(time_url: str | None) -> dict:
    """What run.json records of this host's clock at one moment (arm or end)."""
    kernel = kernel_clock()
    offset = offset_against(time_url) if time_url else None
    return {
        "unix_ns": wall_ns(),
        "kernel": None if kernel is None else asdict(kernel),
        "chrony": chrony_tracking(),
        "offset": None if offset is None else {**asdict(offset), "bound_ns": offset.bound_ns},
    }
