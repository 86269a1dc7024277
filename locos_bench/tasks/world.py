"""A small table of common-knowledge facts and names, written for this project.

Generators draw characters, landmarks, capitals and so on from here. Every fact is meant to be
common knowledge (the kind a small model has seen many times), and every landmark's name
shares no word with its city or country, so a question about the city cannot be matched
literally against a needle that names the landmark.
"""

from __future__ import annotations

from dataclasses import dataclass

NAMES: tuple[str, ...] = (
    "Yuki", "Omar", "Clara", "Mateo", "Priya", "Felix", "Nadia", "Hugo", "Leila", "Tomas",
    "Ingrid", "Kofi", "Elena", "Ravi", "Sofia", "Bruno", "Amara", "Lars", "Mei", "Diego",
    "Greta", "Jonas", "Alma", "Victor",
)
"""Character names: common, short, not words of the filler or the fact tables."""

SURNAMES: tuple[str, ...] = (
    "Lindqvist", "Okafor", "Marchetti", "Tanaka", "Novak", "Haddad", "Brennan", "Kowalski",
    "Moreau", "Castillo", "Petrov", "Nakamura", "Fischer", "Oliveira", "Svensson", "Kaur",
)
"""Family names for full-name characters (two-part keys are easier to match)."""


@dataclass(frozen=True)
class Landmark:
    name: str
    """As written after "the" in a needle (`Eiffel Tower`)."""
    city: str
    country: str
    article: bool = True
    """Whether English puts "the" before the name."""

    @property
    def phrase(self) -> str:
        return f"the {self.name}" if self.article else self.name


LANDMARKS: tuple[Landmark, ...] = (
    Landmark("Eiffel Tower", "Paris", "France"),
    Landmark("Colosseum", "Rome", "Italy"),
    Landmark("Big Ben", "London", "England", article=False),
    Landmark("Statue of Liberty", "New York", "the United States"),
    Landmark("Brandenburg Gate", "Berlin", "Germany"),
    Landmark("Sagrada Familia", "Barcelona", "Spain"),
    Landmark("Acropolis", "Athens", "Greece"),
    Landmark("Kremlin", "Moscow", "Russia"),
    Landmark("Forbidden City", "Beijing", "China"),
    Landmark("Burj Khalifa", "Dubai", "the United Arab Emirates"),
    Landmark("Golden Gate Bridge", "San Francisco", "the United States"),
    Landmark("CN Tower", "Toronto", "Canada"),
    Landmark("Space Needle", "Seattle", "the United States"),
    Landmark("statue of Christ the Redeemer", "Rio de Janeiro", "Brazil"),
    Landmark("Hollywood Sign", "Los Angeles", "the United States"),
    Landmark("Petronas Towers", "Kuala Lumpur", "Malaysia"),
    Landmark("Charles Bridge", "Prague", "the Czech Republic"),
    Landmark("Blue Mosque", "Istanbul", "Turkey"),
    Landmark("Atomium", "Brussels", "Belgium"),
    Landmark("Table Mountain", "Cape Town", "South Africa", article=False),
)

CAPITALS: dict[str, str] = {
    "France": "Paris", "Italy": "Rome", "Germany": "Berlin", "Spain": "Madrid",
    "Japan": "Tokyo", "Russia": "Moscow", "Egypt": "Cairo", "Greece": "Athens",
    "China": "Beijing", "England": "London", "Canada": "Ottawa", "Portugal": "Lisbon",
    "Austria": "Vienna", "Ireland": "Dublin", "Norway": "Oslo", "Sweden": "Stockholm",
    "Poland": "Warsaw", "Kenya": "Nairobi", "Argentina": "Buenos Aires", "Thailand": "Bangkok",
    "South Korea": "Seoul", "Turkey": "Ankara", "Peru": "Lima", "Cuba": "Havana",
}

LANGUAGES: dict[str, str] = {
    "France": "French", "Italy": "Italian", "Germany": "German", "Spain": "Spanish",
    "Japan": "Japanese", "Russia": "Russian", "Greece": "Greek", "China": "Chinese",
    "Portugal": "Portuguese", "Poland": "Polish", "Sweden": "Swedish", "Turkey": "Turkish",
    "Brazil": "Portuguese", "Mexico": "Spanish", "Egypt": "Arabic", "Norway": "Norwegian",
}

ROOMS: tuple[str, ...] = (
    "kitchen", "garden", "hallway", "bathroom", "bedroom", "office", "cellar", "garage",
)
"""bAbI-style locations (only babilong-synth uses them; the filler never does)."""

OBJECTS: tuple[str, ...] = ("football", "apple", "umbrella", "backpack", "guitar", "notebook")
"""bAbI-style portable objects."""

KEY_ADJECTIVES: tuple[str, ...] = (
    "red", "blue", "green", "yellow", "purple", "orange", "silver", "pink", "brown", "white",
)
KEY_NOUNS: tuple[str, ...] = (
    "lantern", "kettle", "bicycle", "teapot", "compass", "violin", "suitcase", "ladder",
    "mirror", "drum", "anchor", "trumpet",
)
"""kv-retrieval keys are `<adjective> <noun>` pairs."""

JOBS: tuple[str, ...] = (
    "dentist", "pilot", "plumber", "nurse", "lawyer", "chef", "firefighter", "librarian",
    "architect", "pharmacist",
)
"""musique-synth's second-hop answers."""

STOPWORDS: frozenset[str] = frozenset(
    """a an the and or but if of to in on at by for with from into onto over under near
    is are was were be been being am has have had do does did done will would can could
    shall should may might must who whom whose which what when where why how that this
    these those it its he she they them his her their there here not no yes as so than
    then too very just also s about up down out off all any some each one""".split()
)
"""Function words ignored when checking that a question shares no content word with its
needle."""


def content_words(text: str) -> set[str]:
    """Lower-cased words of `text` that are not stopwords (possessive 's dropped)."""
    import re

    words = re.findall(r"[a-z]+", text.lower().replace("'s", ""))
    return {w for w in words if w not in STOPWORDS}


def answer_bearing_words() -> set[str]:
    """Every word a generator may use as an answer or a key: the filler must avoid them."""
    words: set[str] = set()
    for name in (*NAMES, *SURNAMES):
        words.add(name.lower())
    for lm in LANDMARKS:
        words |= content_words(lm.name) | content_words(lm.city) | content_words(lm.country)
    for country, capital in CAPITALS.items():
        words |= content_words(country) | content_words(capital)
    for country, language in LANGUAGES.items():
        words |= content_words(country) | content_words(language)
    words |= set(ROOMS) | set(OBJECTS) | set(KEY_NOUNS) | set(KEY_ADJECTIVES) | set(JOBS)
    words |= {"married", "works", "job", "number", "lives", "live", "next", "city"}
    return words
