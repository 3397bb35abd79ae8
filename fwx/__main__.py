from __future__ import annotations

from fwx.cli import main

main()
