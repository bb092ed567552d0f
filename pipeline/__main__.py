"""`python -m pipeline` is the `loopmeter` command."""
from pipeline.cli import main

main()
