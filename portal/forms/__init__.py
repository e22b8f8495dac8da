"""The pages' forms, by subject: jobs, filters, configuration; errors and fields they share."""
