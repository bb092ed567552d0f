"""The CLI's commands, one module per area. Each module imports only typer and the standard
library at import time; the heavy libraries are imported inside the command bodies."""
