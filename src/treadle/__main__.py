"""``python -m treadle`` runs the command line."""

from treadle.cli import main

if __name__ == "__main__":
    main()
