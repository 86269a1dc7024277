"""The organism's synthetic language: its words, its world facts and its stories.

The `organism` model (`locos_bench.models.organism`) is trained on this language by
`scripts/train_organism.py`, and the `organism` generator (`tasks/generators/organism.py`)
asks it questions in it. Every word is one token of the organism's word-level tokenizer.

* **World facts** (`CITY_OF`): each landmark lies in one city. They appear in training only
  (`fact_words`: "Greymill is in Varno ."), never in a story or a question's context, so the
  weights must hold them.
* **Stories**: several characters, each in one needle sentence "Yuki lives near Greymill .",
  among filler sentences drawn from a small grammar. The characters of one story have
  distinct names, landmarks and cities (so every question has exactly one answer).
* **Questions**, three kinds (`KINDS`):
  - `literal`: "who lives near Greymill" -> the name (the question repeats the needle's
    landmark);
  - `nonliteral` (NoLiMa's sense): "who has been to Varno" -> the name; the question shares
    no word with the needle, so the model must map each landmark to its city to match;
  - `nonliteral-answer`: "which city was visited by Yuki" -> the city, a word absent from
    the story.

  Each question ends with its one content word, right before "Answer:" (no "?": one hop
  fewer from the answer position to the word to look up), so all three kinds look up the
  same position relative to the answer. Training also asks a fourth kind, never evaluated
  (`TRAINING_KINDS`): "where is Yuki" -> the landmark.
* **Held-out pairs** (`HELD_OUT`): a fixed quarter of all (name, landmark) pairs, chosen by a
  seeded draw, exactly `HELD_OUT_PER_NAME` landmarks per name. Training stories draw every
  character from the other pairs (`TRAIN_PAIRS`) and evaluation stories every character from
  `HELD_OUT`, so no evaluation story's (name, landmark) pair, in any position, was ever seen
  in training.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from locos_bench.tasks.world import NAMES

LANDMARKS: tuple[str, ...] = (
    "Greymill", "Stonebridge", "Redgate", "Moonwell", "Ashtower", "Oakhall", "Saltpier", "Irongate",
    "Foxden", "Glasshouse", "Bellspire", "Windmill", "Copperdome", "Elmarch", "Rookfort", "Silverlake",
    "Hollowbarn", "Lanternhall", "Briarkeep", "Goldharbor", "Mossgarden", "Thornabbey", "Falconrock",
    "Dunemarket", "Frostpark", "Amberbath", "Pinechapel", "Cliffhouse", "Emberforge", "Ravenwharf",
    "Willowmaze", "Starbeacon",
)
CITIES: tuple[str, ...] = ("Varno", "Keldia", "Ostmark", "Pellin", "Suvaro", "Tarrow", "Brenna", "Ludac")

WORLD_SEED = 20260101
"""Seeds the landmark -> city assignment and the held-out pairs (fixed: the shipped weights
learned this world)."""

HELD_OUT_PER_NAME = 8
"""Landmarks held out per name (a quarter of `LANDMARKS`)."""


def _landmark_cities() -> dict[str, str]:
    """Each landmark's city: every city gets `len(LANDMARKS) // len(CITIES)` landmarks."""
    rng = random.Random(f"{WORLD_SEED}/cities")
    cities = [CITIES[i % len(CITIES)] for i in range(len(LANDMARKS))]
    rng.shuffle(cities)
    return dict(zip(LANDMARKS, cities))


def _held_out_pairs() -> frozenset[tuple[str, str]]:
    rng = random.Random(f"{WORLD_SEED}/held-out")
    return frozenset((name, lm) for name in NAMES for lm in rng.sample(LANDMARKS, HELD_OUT_PER_NAME))


CITY_OF: dict[str, str] = _landmark_cities()
"""The world facts: landmark -> the city it lies in."""

HELD_OUT: frozenset[tuple[str, str]] = _held_out_pairs()
"""(name, landmark) pairs that only evaluation stories use."""

TRAIN_PAIRS: frozenset[tuple[str, str]] = frozenset(
    (n, lm) for n in NAMES for lm in LANDMARKS) - HELD_OUT
"""(name, landmark) pairs that training stories use."""

SPLIT_PAIRS = {"train": TRAIN_PAIRS, "held-out": HELD_OUT}

KINDS = ("literal", "nonliteral", "nonliteral-answer")
"""Question kinds, in curriculum order."""

TRAINING_KINDS = (*KINDS, "landmark")
"""`KINDS` and one asked in training only: "where is Yuki" -> the landmark, a copy from
the story that teaches finding a character's needle by its name, which `nonliteral-answer`
then needs with the landmark's city as the answer."""

NEEDLE = "{name} lives near {landmark} ."
QUESTIONS = {
    "literal": "who lives near {landmark}",
    "nonliteral": "who has been to {city}",
    "nonliteral-answer": "which city was visited by {name}",
    "landmark": "where is {name}",
}
FACT = "{landmark} is in {city} ."
QUESTION_WORD = "Question:"
ANSWER_WORD = "Answer:"
FACTS_WORD = "Facts:"

_SUBJECTS = ("the dog", "a bird", "the wind", "the farmer", "a child", "the river", "the old cat",
             "a stranger", "the baker", "the rain")
_VERBS = ("slept", "waited", "sang", "walked", "rested", "played", "wandered", "laughed", "stayed",
          "listened")
_TAILS = ("all day", "for a while", "in the sun", "by the road", "after lunch", "quietly",
          "without a sound", "until dusk", "at noon", "again")
SPECIALS = ("<bos>", "<eos>", "<unk>", "<pad>")


def filler_sentence(rng: random.Random) -> list[str]:
    """One filler sentence as words ("the dog slept all day ."): it names no character,
    landmark or city."""
    return [*rng.choice(_SUBJECTS).split(), rng.choice(_VERBS), *rng.choice(_TAILS).split(), "."]


def vocabulary() -> list[str]:
    """Every word of the language, specials first, in a fixed order (the token ids)."""
    words = [*SPECIALS, QUESTION_WORD, ANSWER_WORD, FACTS_WORD]
    templates = [NEEDLE, FACT, *QUESTIONS.values(), *_SUBJECTS, *_VERBS, *_TAILS]
    for text in templates:
        for w in text.split():
            if not w.startswith("{") and w not in words:
                words.append(w)
    return words + list(NAMES) + list(LANDMARKS) + list(CITIES)


@dataclass(frozen=True)
class Character:
    name: str
    landmark: str

    @property
    def city(self) -> str:
        return CITY_OF[self.landmark]


@dataclass
class Story:
    """A story as words, and where each character's needle sentence lies (word indices)."""

    words: list[str]
    characters: list[Character]
    spans: list[tuple[int, int]]
    """`[start, end)` word indices of each character's needle sentence, in `characters` order."""


def draw_characters(rng: random.Random, n: int, split: str) -> list[Character]:
    """`n` characters with distinct names, landmarks and cities, every (name, landmark) pair
    from `split` (`train` or `held-out`)."""
    pairs = SPLIT_PAIRS[split]
    if not 1 <= n <= len(CITIES):
        raise ValueError(f"a story holds 1..{len(CITIES)} characters, not {n}")
    while True:
        names = rng.sample(NAMES, n)
        chosen: list[Character] = []
        for name in names:
            used = {c.landmark for c in chosen}
            cities = {c.city for c in chosen}
            options = [lm for lm in LANDMARKS
                       if (name, lm) in pairs and lm not in used and CITY_OF[lm] not in cities]
            if not options:
                break
            chosen.append(Character(name, rng.choice(options)))
        if len(chosen) == n:
            return chosen


def build_story(rng: random.Random, characters: list[Character], n_filler: int,
                target: int = 0, depth: float | None = None) -> Story:
    """The characters' needles in random order among `n_filler` filler sentences; character
    `target`'s needle after `depth` of the filler sentences when given."""
    fillers = [filler_sentence(rng) for _ in range(n_filler)]
    gaps: dict[int, list[int]] = {}
    for i in range(len(characters)):
        slot = round(depth * n_filler) if (i == target and depth is not None) else rng.randint(0, n_filler)
        gaps.setdefault(slot, []).append(i)
    for members in gaps.values():
        rng.shuffle(members)
    words: list[str] = []
    spans: list[tuple[int, int]] = [(0, 0)] * len(characters)
    for gap in range(n_filler + 1):
        for i in gaps.get(gap, []):
            c = characters[i]
            sentence = NEEDLE.format(name=c.name, landmark=c.landmark).split()
            spans[i] = (len(words), len(words) + len(sentence))
            words += sentence
        if gap < n_filler:
            words += fillers[gap]
    return Story(words, list(characters), spans)


def question(kind: str, character: Character) -> tuple[list[str], str]:
    """The question of `kind` about `character` as words, and its one-word answer."""
    if kind not in QUESTIONS:
        raise ValueError(f"unknown question kind {kind!r}; choose from {', '.join(TRAINING_KINDS)}")
    text = QUESTIONS[kind].format(name=character.name, landmark=character.landmark, city=character.city)
    answer = {"nonliteral-answer": character.city, "landmark": character.landmark}.get(kind, character.name)
    return text.split(), answer


def fact_words(landmarks: list[str]) -> list[str]:
    """The world facts of `landmarks`, one sentence each."""
    return [w for lm in landmarks for w in FACT.format(landmark=lm, city=CITY_OF[lm]).split()]
