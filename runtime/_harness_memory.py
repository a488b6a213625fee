"""Peak CPU memory of one workload ``run`` in this (fresh) interpreter; used by ``harness`` as a subprocess.

Reads ``{"text", "name", "size"}`` as JSON on stdin and prints ``{"peak_bytes", "method"}``. After ``setup`` the
kernel's peak-RSS counter is reset by writing ``5`` to ``/proc/self/clear_refs`` (Linux >= 4.0), so ``VmHWM`` after
``run`` is the highest RSS reached during ``run``; the reported number is that minus ``VmRSS`` when ``run``
started. Where that file is not writable, the growth of ``ru_maxrss`` is used (it misses peaks below the one
``setup`` reached, and the method string says so).
"""

from __future__ import annotations

import json
import re
import resource
import sys


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        match = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.MULTILINE)
    if match is None:
        raise OSError(field)
    return int(match.group(1))


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        _status_kib("VmHWM")
        return True
    except OSError:
        return False


def main() -> int:
    request = json.loads(sys.stdin.read())
    from torchlint.runtime.harness import _fresh_state, _seed_all, load_module

    module = load_module(request["text"], request["name"])
    state = _fresh_state(module, "cpu", request["size"])
    _seed_all(1)
    if _reset_peak():
        start = _status_kib("VmRSS")
        module.run(state)
        peak = _status_kib("VmHWM")
        method = ("peak RSS (VmHWM, reset after setup) during run() minus RSS at its start; first run in a fresh "
                  "process, so one-time lazy init common to both forms is included")
        kib = peak - start
    else:
        start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        module.run(state)
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start
        if sys.platform == "darwin":
            kib //= 1024  # bytes there
        method = "growth of ru_maxrss during run(), fresh process (misses peaks below setup's)"
    print(json.dumps({"peak_bytes": max(0, kib) * 1024, "method": method}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
