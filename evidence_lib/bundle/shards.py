"""One share of a run's scenarios (`make evidence SHARD=i/n`), so that CI runners split the work
and `python -m evidence_lib merge` assembles one bundle.

The split is deterministic and needs nothing but the scenario names: the scenarios, heaviest first
by a fixed table of their typical time (then by name), each given to the share with the least
time so far (longest-processing-time first), so that every runner of a matrix computes the same
split and the shares take about the same time. A shard's manifest names its spec and the whole
plan, so the merge can prove that every share is there once.
"""

from __future__ import annotations

from dataclasses import dataclass

from evidence_lib.errors import BadInput

# typical seconds of each scenario in a bundle on 2 cores (the figures of issue 34): only the
# order and the balance depend on them, never a verdict
WEIGHT = {
    "model_check": 310, "races": 236, "mutation": 214, "negative_controls": 191, "performance": 150,
    "reconciliation": 70, "response_loss": 60, "security": 60, "queue_identity": 45, "validation": 40,
    "admission": 35, "ab_proof": 20,
}  # fmt: skip


class BadShard(BadInput):
    """A shard spec that is not i/n with 1 <= i <= n."""


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    @staticmethod
    def parse(text: str) -> Shard:
        head, sep, tail = text.partition("/")
        if not sep or not head.isdigit() or not tail.isdigit() or not 1 <= int(head) <= int(tail):
            raise BadShard(f"--shard {text!r}: expected i/n with 1 <= i <= n, for example 2/3")
        return Shard(int(head), int(tail))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shares(names: list[str], count: int) -> list[list[str]]:
    """The scenarios of each of `count` shares (each in the order given)."""
    bins: list[list[str]] = [[] for _ in range(count)]
    load = [0] * count
    for name in sorted(names, key=lambda n: (-WEIGHT.get(n, 60), n)):
        i = min(range(count), key=lambda k: (load[k], k))
        bins[i].append(name)
        load[i] += WEIGHT.get(name, 60)
    return [[n for n in names if n in set(b)] for b in bins]


def share(names: list[str], shard: Shard) -> list[str]:
    """The scenarios shard `shard` runs (may be empty when there are more shards than scenarios)."""
    return shares(names, shard.count)[shard.index - 1]
