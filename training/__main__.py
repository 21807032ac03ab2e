"""`python -m training` runs the `rmjudge-train` command."""

from training.cli import main

if __name__ == "__main__":
    main()
