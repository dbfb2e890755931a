"""The Go tools of the tests other than the control plane (VictoriaMetrics, Thanos), built on first use.

Owns finding their binaries: ``scripts/build-tools.sh <tool>`` builds one from the Go module proxy into
``~/.cache/podtailor/<tool>-<version>/bin`` when it is missing (progress on stderr) and prints its path.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.harness.process import HarnessError

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_TOOLS = REPO_ROOT / "scripts" / "build-tools.sh"


def tool_binary(tool: str) -> Path:
    """The cached binary of ``tool`` (``victoria-metrics``, ``thanos``); built by build-tools.sh when missing."""
    result = subprocess.run(["bash", str(BUILD_TOOLS), tool], stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise HarnessError(f"building {tool} failed (exit {result.returncode}); see the messages above")
    return Path(result.stdout.strip().splitlines()[-1])
