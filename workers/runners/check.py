"""The validator's runner: the project's ``check_command`` in a plain sandbox, no model at all.

Exit 0 (within the sandbox's command timeout) passes the gate and completes the task; anything
else does not, and its output goes back to the builder as the summary (backpressure).
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.event_payloads import ToolExecuted
from workers.runners.base import Emit, RunResult, StartSandbox

CHECK_OUTPUT_CHARS = 8000


@dataclass
class CheckRunner:
    command: str
    start_sandbox: StartSandbox
    emit: Emit

    def run(self) -> RunResult:
        sandbox = self.start_sandbox(None)
        try:
            result = sandbox.run(self.command)
        finally:
            sandbox.close()
        passed = result.exit_code == 0 and not result.timed_out
        output = result.output[-CHECK_OUTPUT_CHARS:]
        self.emit(
            ToolExecuted(
                tool="check",
                command=self.command,
                exit_code=result.exit_code,
                is_error=not passed,
                output=output,
            )
        )
        timed_out = " (timed out)" if result.timed_out else ""
        summary = f"`{self.command}` exited with {result.exit_code}{timed_out}:\n{output}"
        return RunResult(completed=passed, summary=summary, turns=0)
