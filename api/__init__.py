"""The REST API v1 (api.md): thin views over `scheduling.services` and `scheduling.selectors`."""
