"""The one way the rewrite refuses a loop."""


class NoFix(Exception):
    """The loop cannot be lifted exactly; the message says why (it ends up in the finding)."""
