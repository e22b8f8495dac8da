"""The server-rendered pages (pages.md): thin views that read through selectors and write through
services.

Each live page renders whole for a plain request, and only the fragment htmx asked for (by its target)
otherwise.
"""
