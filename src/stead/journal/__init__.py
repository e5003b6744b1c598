"""The journal's vocabulary and its state machine, with no I/O.

Records (:mod:`.records`), event payloads (:mod:`.events`), operation keys (:mod:`.keys`),
commands (:mod:`.commands`), every state transition (:mod:`.transitions`) and the protocols a
store implements (:mod:`.protocol`). Nothing here opens a file, awaits, or knows what an agent
is: the runtime and the stores build on it, and it on nothing but ``_json``, ``_clock`` and
``errors``.
"""
