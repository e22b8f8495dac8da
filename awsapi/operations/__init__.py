"""The operations of botocore's `batch` model that quotaportal serves, by subject (`config`, `jobs`, `tags`):
each is a function `(user, members) -> response body` that `awsapi.views.OPERATIONS` names."""
