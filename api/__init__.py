"""The REST API v1 (SPEC section 5): thin views over `scheduling.services` and `scheduling.selectors`."""
