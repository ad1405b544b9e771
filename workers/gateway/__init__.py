"""The per-iteration LLM gateway: a unix socket in the worker, bind-mounted into a harness's
container, that swaps a revocable token for the real key and is the one gate every harness model
call goes through (reservation, rate limits, metering from the stream, recording) — DESIGN.md rule 9."""
