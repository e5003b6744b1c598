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


def test_stead_imports_and_runs_on_sqlite_without_the_optional_extras() -> None:
    """The core needs none of the extras: with psycopg, the provider SDKs and starlette
    missing, ``import stead`` works and a run completes on SQLite."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "for name in ('psycopg', 'psycopg_pool', 'openai', 'anthropic', 'starlette', 'uvicorn'):\n"
        "    sys.modules[name] = None\n"
        "import asyncio, tempfile, os, stead\n"
        "from stead.testing import ScriptedModel\n"
        "app = stead.App(agents=[stead.Agent(id='a', version='1', model=ScriptedModel(['hi']))])\n"
        "async def main():\n"
        "    with tempfile.TemporaryDirectory() as d:\n"
        "        async with await app.open(stead.SqliteStore(os.path.join(d, 's.db'))) as rt:\n"
        "            run = await rt.submit('a', session_id='s', request_id='r', prompt='go')\n"
        "            print((await run.result()).output)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "hi"
