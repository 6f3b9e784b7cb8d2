"""The configuration: TOML validated into frozen settings."""
