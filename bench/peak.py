"""A process's own peak memory, for the benchmarks' memory figures."""

from __future__ import annotations


def own_peak_rss_mb() -> float:
    """This process's own peak RSS. On Linux from /proc (VmHWM): ``ru_maxrss`` keeps the
    parent's peak across fork and exec (execve under vfork carries it over), so a worker
    started by a parent that had built a long trace in memory reported the parent's peak,
    whatever it used itself."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
