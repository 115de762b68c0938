"""Errors a user can fix. The CLI prints them as one line and exits with code 2."""

from __future__ import annotations


class UserError(Exception):
    """Bad input: the message names the problem and the fix."""
