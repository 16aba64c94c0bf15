"""`docs generate`: the schedule table and one Mermaid diagram per chain, as Markdown files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runlane.cli.commands.setup import make_directory
from runlane.cli.failures import one_line_errors
from runlane.cli.options import CatalogOpt, settings_from
from runlane.cli.output import out


@one_line_errors
def docs_generate_cmd(
    directory: Annotated[Path, typer.Argument(help="Where to write the Markdown files.")],
    catalog: CatalogOpt = None,
) -> None:
    """Write the schedule table and one Mermaid diagram per chain into DIRECTORY."""
    from runlane.catalog.loader import load_catalog
    from runlane.cli.docs_gen import write_docs

    cat = load_catalog(settings_from(catalog, None).catalog_path)
    make_directory(directory)
    for path in write_docs(cat, directory):
        out.print(f"wrote {path}")
