"""P-Mem core: the typed provenance graph (placeholder until the core lands)."""
