"""Every agent run, whatever the harness, through one :class:`~workers.runners.base.Runner`
protocol: ``base`` (the protocol and the end of a run), ``build`` (each
:data:`~shared.harnesses.HarnessName`'s runner, and the validator's check, in one table),
``api`` + ``builtin`` (the built-in tool-use loop), ``cli/`` (the agent CLIs, one module each),
``check`` (the validator's check command).

May import ``shared`` and what lies below it in the workers layers (``agent``, ``gateway``, the
ledger, ``llm``, ``tools``, ``claim``, ``sandbox``); ``workers.iteration`` builds and runs its
runners, the embedded engine asks it whether an agent CLI may run on the host.
"""
