"""`python -m rmjudge.training` runs the `rmjudge-train` command."""

from rmjudge.training.cli import main

if __name__ == "__main__":
    main()
