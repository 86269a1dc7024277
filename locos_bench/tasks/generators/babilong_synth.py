"""`babilong-synth`: bAbI-style fact tracking scattered through the haystack.

Two task types, alternating by example index (or fixed with `qa`):

* qa1, single supporting fact: people move between rooms; "Where is Omar?" The needle is the
  target's last move; the target's earlier moves and everyone else's are distractors.
* qa2, two supporting facts: the target picks up an object, then moves; "Where is the
  apple?" Both facts are needles; other people's pickups and moves are distractors.

Facts keep their story order in the text; the needle (the last supporting fact) sits at the
example's depth.
"""

from __future__ import annotations

import random
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.tasks import world
from locos_bench.tasks.generators import register_generator
from locos_bench.tasks.spec import Example
from locos_bench.tasks.text import Haystack, Piece

_MOVES = ("went to the {room}.", "moved to the {room}.", "walked into the {room}.",
          "travelled to the {room}.")
_PICKUPS = ("picked up the {obj}.", "grabbed the {obj}.", "took the {obj}.")


@register_generator("babilong-synth")
def babilong_synth(
    spec: Any,
    index: int,
    rng: random.Random,
    *,
    qa: list[int] | int = (1, 2),
    n_people: int = 3,
    moves_per_person: int = 1,
    question1: str = "Where is {person}?",
    question2: str = "Where is the {object}?",
    **scaffold: Any,
) -> Example:
    """`scaffold`: the haystack's options (`locos_bench.tasks.text.Haystack`)."""
    hay = Haystack(spec, index, rng, **scaffold)
    where, depth = hay.where, hay.depth
    kinds = [qa] if isinstance(qa, int) else list(qa)
    if not kinds or any(k not in (1, 2) for k in kinds):
        raise LocosError(f"{where}: qa must be 1, 2 or a list of them")
    kind = kinds[index % len(kinds)]
    if not 1 <= n_people <= 6 or not 1 <= moves_per_person <= 3:
        raise LocosError(f"{where}: need 1..6 people and 1..3 moves per person")
    people = rng.sample(world.NAMES, n_people)
    target = people[0]

    def move(name: str, room: str) -> str:
        return f"{name} {rng.choice(_MOVES).format(room=room)}"

    # Story events as (person, sentence, room or None); the target's final location is the
    # answer and differs from every other final location.
    rooms = rng.sample(world.ROOMS, len(world.ROOMS))
    finals = dict(zip(people, rooms[:n_people]))
    events: list[tuple[str, str, str]] = []
    for person in people:
        spare = [r for r in world.ROOMS if r != finals[person]]
        for r in rng.sample(spare, moves_per_person - 1):
            events.append((person, move(person, r), "earlier"))
        events.append((person, move(person, finals[person]), "final"))
    objects = rng.sample(world.OBJECTS, n_people)
    holder = dict(zip(people, objects))
    rng.shuffle(events)
    # Each person's moves must keep their order: re-sort per person by appearance.
    by_person: dict[str, list[int]] = {}
    for i, (p, _, _) in enumerate(events):
        by_person.setdefault(p, []).append(i)
    for p, idxs in by_person.items():
        mine = [e for e in events if e[0] == p]
        mine.sort(key=lambda e: e[2] == "final")
        for i, e in zip(idxs, mine):
            events[i] = e
    if kind == 2:
        # Each person picks up their object before their final move.
        with_pickups: list[tuple[str, str, str]] = []
        for e in events:
            if e[2] == "final":
                p = e[0]
                text = f"{p} {rng.choice(_PICKUPS).format(obj=holder[p])}"
                with_pickups.append((p, text, "pickup"))
            with_pickups.append(e)
        events = with_pickups
    needle_kinds = {"final", "pickup"} if kind == 2 else {"final"}
    anchor = next(i for i, e in enumerate(events) if e[0] == target and e[2] == "final")
    pieces = [
        Piece(
            text,
            "needle" if (p == target and k in needle_kinds) else "distractor",
            depth if i == anchor else None,
        )
        for i, (p, text, k) in enumerate(events)
    ]
    context = hay.context(pieces, ordered=True)
    if kind == 1:
        question = question1.format(person=target)
    else:
        question = question2.format(object=holder[target])
    return hay.example(
        context,
        pieces,
        question=question,
        answers=[finals[target]],
        metadata={
            "qa": kind,
            "people": people,
            "target": target if kind == 1 else holder[target],
            "candidates": sorted({finals[p] for p in people}
                                 | {e[1].rsplit(" ", 1)[-1].rstrip(".") for e in events
                                    if e[2] == "earlier"}),
            "item": (f"qa1:{target}@{finals[target]}" if kind == 1
                     else f"qa2:{target}+{holder[target]}@{finals[target]}"),
        },
    )
