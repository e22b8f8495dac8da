"""quotaportal's reference executor: takes work from the REST API and runs each job as a real process.

Standard library plus `requests`, no Django: it runs on a GPU host that has nothing of the portal installed.
"""

__version__ = "0.1.0"
