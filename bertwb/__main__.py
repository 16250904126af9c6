"""``python -m bertwb``: the ``bertwb`` command line, as torchrun and the malloc re-exec (bertwb.memory) start it."""

from bertwb.cli import main

if __name__ == "__main__":
    main()
