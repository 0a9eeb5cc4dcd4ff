"""The provisioning planner: how the SandboxPool reaches N usable sandboxes soonest.

Invariant: `Planner.plan` is a decision over one `Supply` snapshot and the latencies it has
learned, with no clock and no I/O. A `Plan` never forks or hands out more sandboxes than are
idle, hands out only to waiting claimers, keeps cold creates within `max_creating` in flight,
and asks for no fork or create once what is on hand and on the way covers what is wanted
(a straggler's twin is the one exception: a create past its p95 is counted as missing, once).

How it decides (all in seconds from now, from `LatencyModel`, learned online):
- warm first: idle sandboxes go to waiting claimers unless the wave needs them as fork parents;
- without forks: cold creates up to the deficit and the in-flight cap (a create's latency grows
  with the creates in flight, but throughput grows faster, so the cap is the fastest way);
- with forks: every sandbox on hand or on the way is a seed of a tree that doubles each fork
  time f (a parent forks one child at a time, children fork too). The planner adds the number
  of cold creates that brings the projected finish closest to its best (later creates arrive
  after the tree needs them, so past a point they stop helping) and keeps the wave's deadline
  at that finish (+ `slack_rounds` fork times, 0 by default: letting a few early claimers go
  costs the whole wave a round). The shortfall forks first; idle sandboxes the tree can spare
  while still meeting the deadline go to claimers at once;
- stragglers: a create still out when 95% of its wave (20 or more) has ended gets a twin (it is
  counted as missing, once); whichever arrives second is surplus and is discarded;
- the next wave (`wanted_next`) is provisioned only once the current one is covered.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

INF = float("inf")


@dataclass(frozen=True)
class PlannerConfig:
    """Priors (replaced by observations as they come) and the hand-out slack."""

    prior_create: float = 3.0  # seconds for a lone cold create, before any is observed
    prior_slope: float = 1.0  # extra seconds per doubling of creates in flight, before observed
    prior_fork: float = 1.0
    slack_rounds: float = 0.0  # the wave may finish this many fork times after its best finish
    create_tolerance: float = 0.1  # seconds: fewer creates are preferred within this of the best finish
    hedge_wave: int = 20  # creates a wave needs before its stragglers get twins
    window: int = 512  # observations kept

    def __post_init__(self) -> None:
        if min(self.prior_create, self.prior_fork) <= 0 or self.prior_slope < 0 or self.slack_rounds < 0:
            raise ValueError("planner priors must be positive and slack_rounds >= 0")


class LatencyModel:
    """Seconds a cold create takes by the creates in flight when it was sent, and a fork takes,
    from what this pool observed.

    Creates are binned by log2(creates in flight); a bin's median is its estimate, straight
    lines in log2 between observed bins, and past the observed ones the steeper of the last two
    bins' slope and the prior slope (latency grows faster under load, never slower). Until a
    create is observed the priors stand in."""

    def __init__(self, config: PlannerConfig = PlannerConfig()) -> None:
        self.config = config
        self._bins: dict[int, deque[float]] = {}
        self._forks: deque[float] = deque(maxlen=config.window)
        self._seen = 0
        self._medians: list[tuple[int, float]] = []

    @property
    def creates_seen(self) -> int:
        return self._seen

    def observe_create(self, concurrency: int, seconds: float) -> None:
        key = round(math.log2(max(1, concurrency)))
        self._bins.setdefault(key, deque(maxlen=64)).append(max(0.0, seconds))
        self._medians = sorted((k, _quantile(v, 0.5)) for k, v in self._bins.items())
        self._seen += 1

    @property
    def forks_seen(self) -> int:
        return len(self._forks)

    def observe_fork(self, seconds: float) -> None:
        self._forks.append(max(0.0, seconds))

    def create_p50(self, concurrency: int) -> float:
        x = math.log2(max(1, concurrency))
        points, slope = self._medians, self.config.prior_slope
        if not points:
            return self.config.prior_create + slope * x
        if x <= points[0][0]:
            return points[0][1]
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            if x <= x1:
                return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        if len(points) > 1:
            (x0, y0), (x1, y1) = points[-2], points[-1]
            slope = max(slope, (y1 - y0) / (x1 - x0))
        return points[-1][1] + slope * (x - points[-1][0])

    def fork_p50(self) -> float:
        return _quantile(self._forks, 0.5) if self._forks else self.config.prior_fork


@dataclass(frozen=True)
class InFlight:
    """One cold create on the way: how long ago it was sent, with how many in flight (itself
    included), whether it has a twin, and its wave's p95 once 95% of the wave has ended."""

    key: int
    age: float
    concurrency: int
    hedged: bool = False
    wave_p95: float | None = None


class CreateWaves:
    """The pool's cold creates in flight, grouped in waves: a create sent while none was in flight
    starts a wave, the others join the current one. A wave's p95 is known once 95% of at least
    `min_size` of its creates have ended (ended = succeeded or gave up)."""

    def __init__(self, min_size: int = 20) -> None:
        self.min_size = min_size
        self._out: dict[int, tuple[float, int, bool, int]] = {}  # key -> (sent, concurrency, hedged, wave)
        self._waves: dict[int, tuple[int, list[float]]] = {}  # wave -> (sent, durations of the ended)
        self._keys = 0

    def __len__(self) -> int:
        return len(self._out)

    def send(self, now: float) -> int:
        """Record one create sent now; returns its key."""
        self._keys += 1
        if not self._out:
            self._waves = {self._keys: (0, [])}
        wave = max(self._waves)
        sent, ended = self._waves[wave]
        self._waves[wave] = (sent + 1, ended)
        self._out[self._keys] = (now, len(self._out) + 1, False, wave)
        return self._keys

    def end(self, key: int, now: float) -> tuple[int, float]:
        """A create ended: (creates in flight when it was sent, seconds it took)."""
        sent, concurrency, _, wave = self._out.pop(key)
        if wave in self._waves:
            self._waves[wave][1].append(now - sent)
        return concurrency, now - sent

    def hedge(self, key: int) -> None:
        sent, concurrency, _, wave = self._out[key]
        self._out[key] = (sent, concurrency, True, wave)

    def in_flight(self, now: float) -> tuple[InFlight, ...]:
        p95 = {w: self._p95(w) for w in self._waves}
        return tuple(InFlight(k, now - t, c, h, p95.get(w)) for k, (t, c, h, w) in self._out.items())

    def _p95(self, wave: int) -> float | None:
        sent, ended = self._waves[wave]
        if sent < self.min_size or len(ended) < 0.95 * sent:
            return None
        return _quantile(ended, 0.95)


@dataclass(frozen=True)
class Supply:
    """What the pool has and wants, at one instant."""

    wanted: int  # sandboxes the current wave still needs (on hand, on the way or being probed)
    waiting: int  # claimers waiting now
    idle: int  # ready and unclaimed, not forking
    probing: int = 0  # handed to a claimer, being probed
    forks: tuple[float, ...] = ()  # ages of the forks in flight (one per busy parent)
    creates: tuple[InFlight, ...] = ()
    forkable: bool = False
    max_creating: int = 256
    wanted_next: int = 0  # the next wave's sandboxes, provisioned once the current wave is covered
    keep: int | None = None  # sandboxes claims will still take (None: wanted + wanted_next); idle past it is discarded


@dataclass(frozen=True)
class Plan:
    creates: int = 0  # cold creates to send now
    forks: int = 0  # idle sandboxes to start forking now
    hand_out: int = 0  # idle sandboxes to give to waiting claimers now
    discard: int = 0  # idle sandboxes nobody will claim: delete them
    hedge: tuple[int, ...] = ()  # keys of creates past their p95, counted as missing from now on


class Planner:
    """Decides each `Plan`; remembers the current wave's deadline (seconds, on the caller's clock)."""

    def __init__(self, config: PlannerConfig = PlannerConfig()) -> None:
        self.config = config
        self.latency = LatencyModel(config)
        self._deadline: float | None = None

    def plan(self, s: Supply, now: float) -> Plan:
        """What to do now; `now` only places the wave's deadline."""
        hedge = self._stragglers(s)
        coming = [c for c in s.creates if not c.hedged and c.key not in hedge]
        have = s.idle + s.probing + 2 * len(s.forks) + len(coming)
        deficit = s.wanted - have
        spare_next = s.wanted + s.wanted_next - have
        keep = s.wanted + s.wanted_next if s.keep is None else max(s.keep, s.wanted + s.wanted_next)
        discard = min(s.idle, max(0, s.idle + s.probing - keep))
        idle = s.idle - discard
        if deficit <= 0:
            self._deadline = self._deadline if s.waiting else None
            hand = min(idle, s.waiting)
            forks = min(idle - hand, spare_next) if s.forkable and spare_next > 0 else 0
            creates = 0 if forks or not spare_next > 0 else self._room(s, spare_next)
            return Plan(creates, forks, hand, discard, hedge)
        if not s.forkable:
            return Plan(self._room(s, deficit), 0, min(idle, s.waiting), discard, hedge)
        return self._tree_plan(s, idle, coming, deficit, now, discard, hedge)

    # -- fork trees -----------------------------------------------------------------------

    def _tree_plan(self, s: Supply, idle: int, coming: list[InFlight], deficit: int, now: float,
                   discard: int, hedge: tuple[int, ...]) -> Plan:
        f = self.latency.fork_p50()
        need = s.wanted - s.probing
        seeds = self._seeds(s, coming, f)
        creates, finish = self._best_creates(s, seeds + [0.0] * idle, need, f, self._room(s, deficit))
        seeds += [self.latency.create_p50(len(s.creates) + i) for i in range(1, creates + 1)]
        slack = self.config.slack_rounds * f if self.latency.forks_seen else 0.0  # once f is measured
        best = now + finish + slack
        self._deadline = max(min(self._deadline or best, best), now + finish)
        forks = min(idle, max(0, deficit - creates))  # the wave's shortfall forks first
        hand = min(self._spare(idle, seeds, need, self._deadline - now, f), s.waiting, idle - forks)
        return Plan(creates, forks, hand, discard, hedge)

    def _seeds(self, s: Supply, coming: list[InFlight], f: float) -> list[float]:
        """Arrival times (from now) of every sandbox on the way: a busy parent and its child
        both arrive when the fork ends; a create when its estimated latency has passed."""
        seeds = [max(0.0, f - age) for age in s.forks for _ in (0, 1)]
        seeds += [self._remaining(c) for c in coming]
        return seeds

    def _remaining(self, create: InFlight) -> float:
        return max(0.0, self.latency.create_p50(create.concurrency) - create.age)

    def _best_creates(self, s: Supply, seeds: list[float], need: int, f: float, most: int) -> tuple[int, float]:
        """(cold creates to add, projected finish): the fewest within tolerance of the best finish."""
        in_flight = len(s.creates)
        alone = _finish(sorted(seeds), need, f)
        if most == 0 or self.latency.create_p50(in_flight + 1) >= alone:
            return 0, alone  # no create could arrive before the tree is done
        added = [self.latency.create_p50(in_flight + i) for i in range(1, most + 1)]
        counts = sorted({most, *(1 << k for k in range(most.bit_length()) if 1 << k <= most)})
        options = [(0, alone)] + [(n, _finish(sorted(seeds + added[:n]), need, f)) for n in counts]
        best = min(t for _, t in options)
        return next((n, t) for n, t in options if t <= best + self.config.create_tolerance)

    @staticmethod
    def _spare(idle: int, others: list[float], need: int, horizon: float, f: float) -> int:
        """How many of `idle` can be handed out now with the tree still reaching `need` by `horizon`."""
        rounds = max(1, math.floor(max(0.0, horizon) / f + 1e-9))  # at least the fork under way
        grow = 2 ** min(rounds, 30)
        later = sum(2 ** min(30, math.floor((horizon - a) / f)) for a in others if a <= horizon)
        spare = (idle * grow + later - need) // (grow - 1)
        return max(0, min(idle, spare))

    # -- creates --------------------------------------------------------------------------

    def _room(self, s: Supply, wanted: int) -> int:
        return max(0, min(wanted, s.max_creating - len(s.creates)))

    @staticmethod
    def _stragglers(s: Supply) -> tuple[int, ...]:
        """Creates still out after 95% of their wave ended, past the wave's p95: one twin each."""
        return tuple(c.key for c in s.creates
                     if not c.hedged and c.wave_p95 is not None and c.age > c.wave_p95)


def _finish(arrivals: list[float], need: int, f: float) -> float:
    """Seconds until a tree grown from sandboxes arriving at `arrivals` (sorted) numbers `need`,
    each doubling every f from its arrival (continuous: sum of 2**((T - a) / f) = need over the
    arrivals a <= T; later ones do not count), and at least one fork time after the first
    arrival when the arrivals alone are too few."""
    if need <= 0:
        return 0.0
    if len(arrivals) >= need and arrivals[need - 1] <= arrivals[0] + f:
        return arrivals[need - 1]
    mass = 0.0
    for k, arrival in enumerate(arrivals):
        mass += 2.0 ** (-arrival / f)
        finish = max(arrival, arrivals[0] + f, f * math.log2(need / mass))
        if k + 1 == len(arrivals) or finish <= arrivals[k + 1]:
            return finish
    return INF


def _quantile(values: "deque[float] | list[float]", q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
