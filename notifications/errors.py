"""The one error a channel send raises."""


class ChannelError(Exception):
    """A send that failed; permanent when retrying cannot help (a malformed URL, a refused host)."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


def shown_error(text: str, user) -> str:
    """What a delivery's error says to `user`: the details (a refused connection or an HTTP status,
    a port scanner's answer) only to admins; everyone else reads that it failed."""
    if not text:
        return ""
    return text if getattr(user, "is_superuser", False) else "delivery failed"
