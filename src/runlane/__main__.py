"""`python -m runlane` is the same as the `runlane` console script."""

from __future__ import annotations

from runlane.cli.app import main

if __name__ == "__main__":
    main()
