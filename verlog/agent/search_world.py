"""An invented world for the search task: people and companies with made-up names, cities and
years, the passages that state their facts (the corpus the ``search`` tool indexes) and questions
about them, all pure functions of a seed.

Every name is built from random syllables, so no model can know an answer: it has to be retrieved.
Each person has one passage (birth city and year) and each company one (founder, founding year,
city); every company has its own founder. Questions are one-hop (a fact of the passage of the
entity the question names) or two-hop (a fact of the *founder* of the named company: the company's
passage gives the founder's name, the founder's passage the answer, which the company's passage
never states).

The first :data:`EVAL_COMPANIES` companies and their founders are held out: training questions
never name them, and the fixed evaluation set (:func:`eval_questions`) asks only about them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Company", "EVAL_COMPANIES", "EVAL_QUESTIONS", "KINDS", "ONE_HOP", "Passage", "Person", "SearchQuestion",
           "TWO_HOP", "World", "eval_questions", "held_out_words", "make_questions", "make_world", "passages",
           "practice_questions"]

#: companies (and their founders) held out for evaluation
EVAL_COMPANIES = 50
#: size of the fixed evaluation set
EVAL_QUESTIONS = 100

#: one-hop question kinds -> question template ({e}: the entity's name)
ONE_HOP: dict[str, str] = {
    "person_city": "In which city was {e} born?",
    "person_year": "In which year was {e} born?",
    "company_founder": "Who founded {e}?",
    "company_year": "In which year was {e} founded?",
    "company_city": "In which city is {e} based?",
}
#: two-hop question kinds -> question template ({e}: the company's name)
TWO_HOP: dict[str, str] = {
    "founder_city": "In which city was the founder of {e} born?",
    "founder_year": "In which year was the founder of {e} born?",
}
#: every question kind, one-hop first
KINDS: tuple[str, ...] = tuple(ONE_HOP) + tuple(TWO_HOP)

_ONSETS = ("b", "br", "d", "dr", "f", "g", "k", "kr", "l", "m", "n", "p", "qu", "r", "s", "st", "t", "tr", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ei", "ou")
_CODAS = ("", "", "n", "r", "l", "s", "th", "x", "m")
_COMPANY_SUFFIXES = ("Labs", "Works", "Systems", "Foundry", "Holdings", "Dynamics")


@dataclass(frozen=True)
class Person:
    """An invented person: ``name`` ("First Last"), birth ``city`` and birth ``year``."""

    name: str
    city: str
    year: int


@dataclass(frozen=True)
class Company:
    """An invented company: ``name``, ``founder`` (a :class:`Person`'s name), founding ``year`` and
    the ``city`` it is based in (never its founder's birth city)."""

    name: str
    founder: str
    year: int
    city: str


@dataclass(frozen=True)
class World:
    """The people, companies and cities of one seed; ``companies[i]`` was founded by ``people[i]``."""

    seed: int
    people: tuple[Person, ...]
    companies: tuple[Company, ...]
    cities: tuple[str, ...]

    def person(self, name: str) -> Person:
        """The person called ``name``.

        Raises:
            KeyError: no such person.
        """
        return {p.name: p for p in self.people}[name]


@dataclass(frozen=True)
class Passage:
    """One corpus passage: its ``id`` (``person:<name>`` or ``company:<name>``) and ``text``."""

    id: str
    text: str


@dataclass(frozen=True)
class SearchQuestion:
    """One question.

    Attributes:
        question: the question text.
        answer: the gold answer (a name, a city or a year written as digits).
        kind: one of :data:`KINDS`.
        entity: the name the question gives (a person or a company).
        gold: the ids of the passages that support the answer, in the order they must be found
            (one for one-hop, two for two-hop).
        world: the seed of the world the question is about (:attr:`World.seed`).
    """

    question: str
    answer: str
    kind: str
    entity: str
    gold: tuple[str, ...]
    world: int = 0

    @property
    def hops(self) -> int:
        """How many passages the answer needs (1 or 2)."""
        return len(self.gold)


def _word(rng: random.Random, syllables: int) -> str:
    """A made-up word of ``syllables`` syllables (onset, vowel, optional coda), capitalised."""
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)).title()


def _unique_words(rng: random.Random, n: int, used: set[str], syllables: tuple[int, ...]) -> list[str]:
    """``n`` new words (2 letters or more, none in ``used``, which they are added to)."""
    out: list[str] = []
    while len(out) < n:
        word = _word(rng, rng.choice(syllables))
        if len(word) > 2 and word.lower() not in used:
            used.add(word.lower())
            out.append(word)
    return out


def make_world(seed: int, companies: int = 150, cities: int = 30) -> World:
    """The world of ``seed``: ``companies`` companies, each founded by its own person, and ``cities``
    cities; a pure function of its arguments. Every name word (first names, last names, company
    words, cities) is distinct from every other, so the words of a name find its passages only.
    Birth years are 1900-1979; a company is founded 25-50 years after its founder's birth, in a
    city other than the founder's birth city.

    Raises:
        ValueError: ``companies`` < 1 or ``cities`` < 2.
    """
    if companies < 1 or cities < 2:
        raise ValueError(f"make_world: needs companies >= 1 and cities >= 2, got {companies} and {cities}")
    rng = random.Random(f"search-world-{seed}")
    used = {s.lower() for s in _COMPANY_SUFFIXES}
    city_names = _unique_words(rng, cities, used, (2,))
    firsts = _unique_words(rng, companies, used, (2,))
    lasts = _unique_words(rng, companies, used, (2,))
    words = _unique_words(rng, companies, used, (2,))
    people, firms = [], []
    for first, last, word in zip(firsts, lasts, words):
        person = Person(f"{first} {last}", rng.choice(city_names), rng.randint(1900, 1979))
        city = rng.choice([c for c in city_names if c != person.city])
        people.append(person)
        firms.append(Company(f"{word} {rng.choice(_COMPANY_SUFFIXES)}", person.name, person.year + rng.randint(25, 50),
                             city))
    return World(seed, tuple(people), tuple(firms), tuple(city_names))


def passages(world: World) -> list[Passage]:
    """The corpus: one passage per person, then one per company, in the world's order. A person's
    passage names them twice, so a search for their name ranks it above the passage of the company
    they founded (which names them once)."""
    out = [Passage(f"person:{p.name}", f"{p.name} was born in {p.city} in {p.year}. {p.name} grew up there.")
           for p in world.people]
    out += [Passage(f"company:{c.name}", f"{c.name} was founded by {c.founder} in {c.year}. "
                                         f"{c.name} is based in {c.city}.") for c in world.companies]
    return out


def _question(world: World, index: int, kind: str) -> SearchQuestion:
    """The question of ``kind`` about company ``index`` (or, for ``person_*``, its founder)."""
    company = world.companies[index]
    founder = world.person(company.founder)
    if kind in ("person_city", "person_year"):
        answer = founder.city if kind == "person_city" else str(founder.year)
        return SearchQuestion(ONE_HOP[kind].format(e=founder.name), answer, kind, founder.name,
                              (f"person:{founder.name}",), world.seed)
    if kind in ONE_HOP:
        answer = {"company_founder": company.founder, "company_year": str(company.year),
                  "company_city": company.city}[kind]
        return SearchQuestion(ONE_HOP[kind].format(e=company.name), answer, kind, company.name,
                              (f"company:{company.name}",), world.seed)
    if kind in TWO_HOP:
        answer = founder.city if kind == "founder_city" else str(founder.year)
        return SearchQuestion(TWO_HOP[kind].format(e=company.name), answer, kind, company.name,
                              (f"company:{company.name}", f"person:{founder.name}"), world.seed)
    raise ValueError(f"unknown question kind {kind!r}; known: {', '.join(KINDS)}")


def make_questions(world: World, n: int, seed: int, two_hop: float = 0.5) -> list[SearchQuestion]:
    """``n`` training questions about the companies after the first :data:`EVAL_COMPANIES` (or all of
    them when the world has no more) and their founders: each a two-hop kind with probability
    ``two_hop``, else a one-hop kind, kinds drawn uniformly within their group; a pure function of
    (world, n, seed, two_hop).

    Raises:
        ValueError: ``n`` < 0 or ``two_hop`` outside [0, 1].
    """
    if n < 0 or not 0.0 <= two_hop <= 1.0:
        raise ValueError(f"make_questions: needs n >= 0 and 0 <= two_hop <= 1, got {n} and {two_hop}")
    rng = random.Random(f"search-questions-{world.seed}-{seed}")
    first = EVAL_COMPANIES if len(world.companies) > EVAL_COMPANIES else 0
    out = []
    for _ in range(n):
        kind = rng.choice(tuple(TWO_HOP) if rng.random() < two_hop else tuple(ONE_HOP))
        out.append(_question(world, rng.randrange(first, len(world.companies)), kind))
    return out


def eval_questions(world: World) -> list[SearchQuestion]:
    """The fixed evaluation set: :data:`EVAL_QUESTIONS` questions about the first
    :data:`EVAL_COMPANIES` companies and their founders (held out of :func:`make_questions`), half
    two-hop: company ``i`` gets the two-hop kind ``i % 2`` and the one-hop kind ``i % 5``, in order.

    Raises:
        ValueError: the world has fewer than :data:`EVAL_COMPANIES` companies.
    """
    if len(world.companies) < EVAL_COMPANIES:
        raise ValueError(f"eval_questions: the world has {len(world.companies)} companies, needs {EVAL_COMPANIES}")
    two, one = tuple(TWO_HOP), tuple(ONE_HOP)
    out = []
    for i in range(EVAL_COMPANIES):
        out += [_question(world, i, two[i % len(two)]), _question(world, i, one[i % len(one)])]
    return out


def held_out_words(world: World) -> set[str]:
    """The lower-cased name words of the held-out entities of ``world`` (the first :data:`EVAL_COMPANIES`
    companies and their founders), company suffixes (``Labs``, ...) left out."""
    names = [c.name for c in world.companies[:EVAL_COMPANIES]] + [c.founder for c in world.companies[:EVAL_COMPANIES]]
    suffixes = {s.lower() for s in _COMPANY_SUFFIXES}
    return {w.lower() for name in names for w in name.split()} - suffixes


def practice_questions(world: World, n: int, worlds: int, seed: int) -> list[SearchQuestion]:
    """``n`` training questions (:func:`make_questions` with ``seed``) about ``worlds`` *other* worlds,
    world by world (``n // worlds`` from each, one more from the first ``n % worlds``): the worlds of
    seeds ``world.seed + 1``, ``world.seed + 2``, ..., skipping every world that has a name word
    (a city's included) in common with the held-out entities of ``world`` (:func:`held_out_words`), so
    no practice question or passage names one of them. Each question's :attr:`SearchQuestion.world`
    says which world it is about. A pure function of its arguments.

    Questions about many worlds give a format warm-up many more names than one world's 200 training
    entities: a model that learns to write the question's name into its query cannot get there by
    remembering the few names it saw.

    Raises:
        ValueError: ``n`` < 0 or ``worlds`` < 1.
    """
    if n < 0 or worlds < 1:
        raise ValueError(f"practice_questions: needs n >= 0 and worlds >= 1, got {n} and {worlds}")
    avoid = held_out_words(world)
    out: list[SearchQuestion] = []
    seed_k = world.seed
    for k in range(worlds):
        other = None
        while other is None:
            seed_k += 1
            candidate = make_world(seed_k, len(world.companies), len(world.cities))
            words = {w.lower() for p in candidate.people for w in p.name.split()}
            words |= {c.name.split()[0].lower() for c in candidate.companies} | {c.lower() for c in candidate.cities}
            other = None if words & avoid else candidate
        out += make_questions(other, n // worlds + (k < n % worlds), seed)
    return out
