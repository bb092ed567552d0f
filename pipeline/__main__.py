"""`python -m pipeline` is the `loopmeter` command."""
from pipeline.entry import main

main()
