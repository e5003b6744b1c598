"""``python -m stead``: the ``stead`` command."""

from stead.cli import main

if __name__ == "__main__":
    main(prog_name="stead")
