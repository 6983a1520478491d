"""Errors a user can cause; each is printed as one line and exits with code 2."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user (a missing command, an unreadable file, a bad option value)."""
