"""Forge commands: `ingest forge`, `report routing`, `harvest survival`, `report survival`."""
