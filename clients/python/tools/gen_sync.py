"""Writes the synchronous client (``src/delayd/client.py``) from the asyncio
one (``src/delayd/aio.py``), the only copy written by hand.

The rewrite is textual, in the manner of ``unasync``: ``async def`` becomes
``def``, ``await`` goes, the ``Async`` classes and asyncio calls become
their sync counterparts, and the module docstring is replaced. Every rule
but the renames must apply at least once, so a change to ``aio.py`` that
a rule no longer fits stops the generator instead of slipping through.
The result is formatted with ``ruff format`` (the package's dev
requirement) under the package's settings, since dropping ``async`` and
``await`` shortens lines.

Usage (from ``clients/python``)::

    python tools/gen_sync.py            # rewrites src/delayd/client.py
    python tools/gen_sync.py --check    # exit 1 if it is out of date

``tests/test_sync_generated.py`` fails when the committed file differs
from what this produces.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

PACKAGE = Path(__file__).resolve().parents[1]
ASYNC_SOURCE = PACKAGE / "src" / "delayd" / "aio.py"
SYNC_TARGET = PACKAGE / "src" / "delayd" / "client.py"

DOCSTRING = '''"""The synchronous client: :class:`Client` (server-wide calls) and
:class:`Queue` (everything about one queue), over ``httpx.Client``.

Generated from ``delayd.aio`` by ``tools/gen_sync.py``: edit ``aio.py`` and
run the generator, never this file (a test compares the two).
"""'''

# Exact text, in order; each must occur in the async source.
PHRASES: List[Tuple[str, str]] = [
    ("async def ", "def "),
    ("await ", ""),
    ("import asyncio\n", "import threading\nimport time\n"),
    ("asyncio.sleep(", "time.sleep("),
    ("asyncio.Event", "threading.Event"),
    ("Awaitable[object]", "object"),
    ("Awaitable, ", ""),
    ("``async for``: yields", "Yields"),
    ("in ``concurrency`` tasks", "in ``concurrency`` threads"),
]

# Whole identifiers.
NAMES = {
    "AsyncClient": "Client",
    "AsyncQueue": "Queue",
    "AsyncConsumer": "Consumer",
    "AsyncDelivery": "Delivery",
    "run_async_workers": "run_workers",
    "aio_worker": "worker",
    "aclose": "close",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
}
_NAME_RE = re.compile(r"\b(" + "|".join(re.escape(n) for n in NAMES) + r")\b")


class RuleMismatch(Exception):
    """A rewrite rule found nothing to rewrite in the async source."""


def unasync(source: str) -> str:
    """The sync module's text (before formatting) for an async module's."""
    if not source.startswith('"""'):
        raise RuleMismatch("the async module must start with its docstring")
    end = source.index('"""', 3) + 3
    text = DOCSTRING + source[end:]
    for old, new in PHRASES:
        if old not in text:
            raise RuleMismatch(f"{old!r} is not in the async source: update PHRASES in tools/gen_sync.py")
        text = text.replace(old, new)
    return _NAME_RE.sub(lambda match: NAMES[match.group(1)], text)


def ruff_format(text: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(SYNC_TARGET), "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=PACKAGE,
    )
    if result.returncode != 0:
        raise RuntimeError(f"ruff format failed: {result.stderr.strip()}")
    return result.stdout


def generate() -> str:
    return ruff_format(unasync(ASYNC_SOURCE.read_text(encoding="utf-8")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if client.py is out of date")
    args = parser.parse_args()
    wanted = generate()
    current = SYNC_TARGET.read_text(encoding="utf-8") if SYNC_TARGET.exists() else ""
    if args.check:
        if wanted != current:
            print(f"{SYNC_TARGET} is out of date: run python tools/gen_sync.py", file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        SYNC_TARGET.write_text(wanted, encoding="utf-8")
        print(f"wrote {SYNC_TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
