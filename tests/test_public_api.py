import stead
import stead.testing


def test_public_names_are_pinned_and_sorted() -> None:
    assert stead.__all__ == sorted(stead.__all__)
    for name in [
        "App",
        "Agent",
        "tool",
        "ToolContext",
        "ToolCall",
        "ModelRequest",
        "ModelRetry",
        "SqliteStore",
        "SteadError",
        "ConflictError",
        "OwnershipError",
        "NotFoundError",
        "RunFailed",
        "RunCancelled",
    ]:
        assert name in stead.__all__, name
        assert hasattr(stead, name)
    assert stead.testing.ScriptedModel and stead.testing.FunctionModel


def test_every_error_is_a_stead_error() -> None:
    for name in stead.__all__:
        value = getattr(stead, name)
        # ModelRetry and ApprovalRequired are raised by tools to talk to stead, not by stead
        signals = (stead.ModelRetry, stead.ApprovalRequired)
        if isinstance(value, type) and issubclass(value, Exception) and value not in signals:
            assert issubclass(value, stead.SteadError), name
