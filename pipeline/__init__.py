"""loopmeter: AI coding-agent telemetry (ForgeLoop benchmarks, Forge event stores) into trusted numbers."""

__version__ = "0.1.0"
# version of the warehouse layout and table schemas, written into every Parquet file's metadata
SCHEMA_VERSION = 2
