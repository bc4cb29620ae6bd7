"""``python -m treadle`` runs the command line."""

from treadle.entry import main

if __name__ == "__main__":
    main()
