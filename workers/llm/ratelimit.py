"""One rate limit for the whole cluster, kept in Redis.

The provider limits requests, input tokens and output tokens per minute *per API key*, however
many workers share that key; a project may add its own calls or tokens per hour. Each worker
asks the same Redis before every LLM call, so adding workers never pushes the cluster into 429s.

Each limit is a sliding log: a sorted set of ``"<admission id>:<amount>"`` scored by the
Redis server's clock in microseconds, plus a running total. One Lua script checks every window
that applies and counts the call in all of them or in none (Redis runs a script atomically), else
returns how long until the binding one has room. The estimate is counted up front, so that
concurrent workers do not all pass at once, and :meth:`Admission.adjust` corrects it to the
real usage afterwards -- the same estimate-then-adjust the provider applies to ``max_tokens``.

The budget's ledger (:mod:`shared.budget`) *reserves* and *settles* money; a limiter
*admits* a call and *adjusts* what it counted.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import CallExceedsRateLimit, InvalidInput, RateLimitWaitTooLong

log = logging.getLogger(__name__)

PREFIX = "raas:rl:"
_FINGERPRINT = re.compile(r"^[0-9a-f]{16}$")

# KEYS: per window a (log, total) pair. ARGV: now in µs or "" for the server clock, the
# admission id, then per window (limit, window length in µs, amount).
# Returns {1, now} once counted everywhere, or {0, wait in µs, 1-based index of the binding window}.
_ACQUIRE = """
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function amount_of(member) return tonumber(string.match(member, ':(%d+)$')) end
-- Lua 5.1 turns numbers into strings with 14 significant digits: µs timestamps need %d.
local function int(x) return string.format('%d', x) end
local n = #KEYS / 2
local worst_wait, worst = 0, 0
for i = 1, n do
  local log, total = KEYS[2 * i - 1], KEYS[2 * i]
  local limit, span, amount = tonumber(ARGV[3 * i]), tonumber(ARGV[3 * i + 1]), tonumber(ARGV[3 * i + 2])
  -- An entry counts while ts >= now - span, so no closed window of length span exceeds the limit.
  local cutoff = now - span - 1
  local gone = redis.call('ZRANGEBYSCORE', log, '-inf', int(cutoff))
  local used
  if #gone > 0 then
    local freed = 0
    for _, m in ipairs(gone) do freed = freed + amount_of(m) end
    redis.call('ZREMRANGEBYSCORE', log, '-inf', int(cutoff))
    used = redis.call('DECRBY', total, int(freed))
  else
    used = tonumber(redis.call('GET', total) or '0')
  end
  if redis.call('ZCARD', log) == 0 then
    redis.call('DEL', total)
    used = 0
  end
  local excess = used + amount - limit
  if excess > 0 then
    local wait, freed, start = span, 0, 0
    while freed < excess do
      local batch = redis.call('ZRANGE', log, start, start + 99, 'WITHSCORES')
      if #batch == 0 then break end
      for j = 1, #batch, 2 do
        freed = freed + amount_of(batch[j])
        if freed >= excess then
          wait = tonumber(batch[j + 1]) + span + 1 - now
          break
        end
      end
      start = start + 100
    end
    if wait > worst_wait then worst_wait, worst = wait, i end
  end
end
if worst > 0 then return {0, worst_wait, worst} end
for i = 1, n do
  local log, total = KEYS[2 * i - 1], KEYS[2 * i]
  local span, amount = tonumber(ARGV[3 * i + 1]), ARGV[3 * i + 2]
  local ttl_ms = int(math.ceil(span / 1000) + 1000)
  redis.call('ZADD', log, int(now), ARGV[2] .. ':' .. amount)
  redis.call('INCRBY', total, amount)
  redis.call('PEXPIRE', log, ttl_ms)
  redis.call('PEXPIRE', total, ttl_ms)
end
return {1, now}
"""

# KEYS: per token window a (log, total) pair. ARGV: the admission id, then per window
# (estimated amount, actual amount, ttl in ms). An entry that already left its window is skipped.
_ADJUST = """
for i = 1, #KEYS / 2 do
  local log, total = KEYS[2 * i - 1], KEYS[2 * i]
  local old, new, ttl = ARGV[3 * i - 1], ARGV[3 * i], ARGV[3 * i + 1]
  local score = redis.call('ZSCORE', log, ARGV[1] .. ':' .. old)
  if score then
    redis.call('ZREM', log, ARGV[1] .. ':' .. old)
    redis.call('ZADD', log, score, ARGV[1] .. ':' .. new)
    redis.call('INCRBY', total, string.format('%d', tonumber(new) - tonumber(old)))
    redis.call('PEXPIRE', log, ttl)
    redis.call('PEXPIRE', total, ttl)
  end
end
"""


class ProviderLimits(BaseModel):
    """The provider's limits for one API key, shared by every worker using that key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests_per_minute: int | None = Field(default=None, gt=0, description="Requests per window.")
    input_tokens_per_minute: int | None = Field(default=None, gt=0, description="Input tokens per window.")
    output_tokens_per_minute: int | None = Field(default=None, gt=0, description="Output tokens per window.")
    window_s: float = Field(default=60.0, gt=0, description="Window length; 60 s except in tests.")


class ProjectLimits(BaseModel):
    """One project's own limits, shared by every worker running that project."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    calls_per_hour: int | None = Field(default=None, gt=0, description="LLM calls per window.")
    tokens_per_hour: int | None = Field(default=None, gt=0, description="Input + output tokens per window.")
    window_s: float = Field(default=3600.0, gt=0, description="Window length; 3600 s except in tests.")


def key_fingerprint(api_key: str) -> str:
    """Names an API key in Redis and logs without revealing it: sha256, first 16 hex digits."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class _Window:
    name: str
    key: str
    limit: int
    window_us: int
    measures: str  # "calls", "input", "output" or "tokens": what a call adds to it


@dataclass
class Admission:
    """What one admitted call counts in the windows until :meth:`adjust` corrects it."""

    limiter: RateLimiter | None
    admission_id: str
    windows: tuple[_Window, ...] = ()
    amounts: dict[str, int] = field(default_factory=dict)
    admitted_at_us: int | None = None  # the Redis server's clock; None when nothing was limited
    waited_s: float = 0.0

    def adjust(self, actual_input_tokens: int, actual_output_tokens: int) -> None:
        """Replace the estimate with what the call really used (0, 0 for a call that failed early).

        Pass the input tokens the provider counts against its limit (for current Claude models
        ``input_tokens + cache_creation_input_tokens``; cache reads are not counted). The request
        itself stays counted. May be called again; the last call wins.
        """
        if self.limiter is None:
            return
        actual = {"input": actual_input_tokens, "output": actual_output_tokens}
        actual["tokens"] = actual_input_tokens + actual_output_tokens
        self.limiter._adjust(self, actual)


def _amounts(windows: tuple[_Window, ...], input_tokens: int, output_tokens: int) -> dict[str, int]:
    """What one call adds to each kind of window; refuses a call that could never fit."""
    if input_tokens < 0 or output_tokens < 0:
        msg = "token estimates must not be negative"
        raise InvalidInput(msg)
    amounts = {
        "calls": 1,
        "input": input_tokens,
        "output": output_tokens,
        "tokens": input_tokens + output_tokens,
    }
    for w in windows:
        if amounts[w.measures] > w.limit:
            msg = (
                f"one call estimated at {amounts[w.measures]} against {w.name} = {w.limit} "
                "can never be admitted: raise the limit or lower max_tokens / the prompt size"
            )
            raise CallExceedsRateLimit(msg)
    return amounts


class ScriptingClient(Protocol):
    """What the limiter needs of a Redis client (``redis.Redis`` fits)."""

    def register_script(self, script: str, /) -> Callable[..., Any]: ...


class RateLimiter:
    """Admits LLM calls for one API key so the whole cluster stays inside its limits.

    ``clock`` returns the time in seconds to use instead of the Redis server's clock; it exists
    for deterministic tests only. Workers' own clocks disagree, so production leaves it None.
    """

    def __init__(
        self,
        redis_client: ScriptingClient,
        provider: ProviderLimits,
        key_fingerprint: str,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not _FINGERPRINT.match(key_fingerprint):
            # Never echo the value: it may be the key itself.
            msg = "key_fingerprint must be 16 lowercase hex digits: pass key_fingerprint(api_key)"
            raise InvalidInput(msg)
        self.redis = redis_client
        self.provider = provider
        self.fingerprint = key_fingerprint
        self.clock = clock
        self._acquire_script = redis_client.register_script(_ACQUIRE)
        self._adjust_script = redis_client.register_script(_ADJUST)

    def acquire(
        self,
        project_id: str,
        project_limits: ProjectLimits | None,
        estimated_input_tokens: int,
        estimated_output_tokens: int,
        *,
        on_wait: Callable[[float, str], None] | None = None,
        max_wait_s: float = 600.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Admission:
        """Block until one call fits every limit that applies, and count its estimate.

        Args:
            estimated_output_tokens: count ``max_tokens``; ``adjust`` corrects it afterwards.
            on_wait: called as ``on_wait(wait_s, limit_name)`` before each sleep, so the worker
                can say in a ``rate_limit_wait`` event that it is waiting and for which limit.
            max_wait_s: total sleeping this call accepts before giving up.

        Raises:
            CallExceedsRateLimit: the estimate alone is larger than a limit.
            RateLimitWaitTooLong: the next wait would take the total past ``max_wait_s``.
        """
        windows = self._windows(project_id, project_limits)
        amounts = _amounts(windows, estimated_input_tokens, estimated_output_tokens)
        rid = uuid.uuid4().hex[:16]
        if not windows:
            return Admission(limiter=None, admission_id=rid)
        waited_s = 0.0
        while True:
            admitted, value, index = self._attempt(windows, amounts, rid)
            if admitted:
                return Admission(self, rid, windows, amounts, admitted_at_us=value, waited_s=waited_s)
            wait_s, name = value / 1e6, windows[index - 1].name
            if waited_s + wait_s > max_wait_s:
                msg = (
                    f"rate limit {name} needs another {wait_s:.1f}s after {waited_s:.1f}s of waiting, "
                    f"more than the {max_wait_s:.0f}s allowed: lower concurrency or raise the limit"
                )
                raise RateLimitWaitTooLong(msg)
            log.info("rate limit %s (key %s): waiting %.2fs", name, self.fingerprint, wait_s)
            if on_wait is not None:
                on_wait(wait_s, name)
            sleep(wait_s)
            waited_s += wait_s

    def _windows(self, project_id: str, project: ProjectLimits | None) -> tuple[_Window, ...]:
        p, key = self.provider, f"{PREFIX}key:{self.fingerprint}:"
        specs = [
            ("requests_per_minute", key + "requests", p.requests_per_minute, p.window_s, "calls"),
            ("input_tokens_per_minute", key + "input", p.input_tokens_per_minute, p.window_s, "input"),
            ("output_tokens_per_minute", key + "output", p.output_tokens_per_minute, p.window_s, "output"),
        ]
        if project is not None:
            # Keyed by project alone: the limit holds whichever API key a worker uses for it.
            proj, span = f"{PREFIX}project:{project_id}:", project.window_s
            specs.append(("project_calls_per_hour", proj + "calls", project.calls_per_hour, span, "calls"))
            specs.append(
                ("project_tokens_per_hour", proj + "tokens", project.tokens_per_hour, span, "tokens")
            )
        return tuple(
            _Window(name, rkey, limit, round(span_s * 1e6), measures)
            for name, rkey, limit, span_s, measures in specs
            if limit is not None
        )

    def _attempt(
        self, windows: tuple[_Window, ...], amounts: dict[str, int], rid: str
    ) -> tuple[bool, int, int]:
        """One atomic check-and-count; returns (admitted, server time or wait in µs, window index)."""
        keys = [k for w in windows for k in (w.key, w.key + ":total")]
        args: list[Any] = ["" if self.clock is None else round(self.clock() * 1e6), rid]
        for w in windows:
            args += [w.limit, w.window_us, amounts[w.measures]]
        reply = self._acquire_script(keys=keys, args=args)
        return bool(reply[0]), int(reply[1]), int(reply[2]) if len(reply) > 2 else 0

    def _adjust(self, admission: Admission, actual: dict[str, int]) -> None:
        keys: list[str] = []
        args: list[Any] = [admission.admission_id]
        for w in admission.windows:
            if w.measures == "calls":
                continue
            keys += [w.key, w.key + ":total"]
            args += [admission.amounts[w.measures], max(actual[w.measures], 0), w.window_us // 1000 + 1000]
        if keys:
            self._adjust_script(keys=keys, args=args)
        admission.amounts.update({k: max(v, 0) for k, v in actual.items()})
