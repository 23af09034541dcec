"""Paper-specific closed forms and constructions (one module per paper)."""
