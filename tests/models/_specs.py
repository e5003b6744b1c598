"""Tool specs both provider test modules send."""

from __future__ import annotations

from stead.messages import ToolSpec

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather in a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
TIME = ToolSpec(
    name="get_time",
    description="Local time in a timezone.",
    parameters={"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
)
