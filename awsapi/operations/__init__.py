"""The operations of botocore's `batch` model that quotaportal serves, by subject; `OPERATIONS` maps each
lower-case operation name (the URI's last segment) to its function `(user, members) -> response body`."""
