"""The ``stead`` command."""

from __future__ import annotations

import click

from .demo import demo
from .runs import runs

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="stead")
def main() -> None:
    """stead: durable execution for LLM agent runs."""


main.add_command(demo)
main.add_command(runs)
