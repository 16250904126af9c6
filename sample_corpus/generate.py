#!/usr/bin/env python3
"""Generate bertwb's sample corpus: synthetic, deterministic text for every stage of the pipeline.

Run `python sample_corpus/generate.py` to rewrite this folder, or with `--check` to exit 1 when it differs
from a regeneration. Sentences come from a small grammar: the templates and topic words of `lexicon.json`
(data, edited by hand) filled in by the code below. Standard library only. The output depends on nothing
but the seed and the lexicon: each product draws from its own string-seeded `random.Random`, tables keep
the lexicon's order, and no set or `hash()` order ever reaches the output.
"""

from __future__ import annotations

import argparse
import csv
import functools
import io
import json
import random
import re
import sys
import textwrap
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

DEFAULT_SEED = 2019  # the year of the BERT paper; any integer works
HERE = Path(__file__).resolve().parent
LEXICON_FILE = HERE / "lexicon.json"

# Sizes of the products. The pretraining text lands near 2.5 MB with these.
PRETRAIN_DOCUMENTS = 1800
PRETRAIN_SHARDS = 4
DUPLICATE_SHARE = 0.01  # exact copies of documents, for de-duplication to find
PARAGRAPH_BYTES = 75_000
SPLIT_SIZES = {"train": 2000, "dev": 300}
QA_QUESTIONS = {"train": 1200, "dev": 300}  # fewer: every question carries a paragraph of context
MIN_WORDS, MAX_WORDS = 6, 35  # words per sentence, split on whitespace

# ----------------------------------------------------------------------------------------------------
# The lexicon (lexicon.json): one entry per topic, shared words, and the sentence templates.
# ----------------------------------------------------------------------------------------------------


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A key written twice in the hand-edited lexicon is an error, not a silent overwrite by the last one."""
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ValueError(f"{LEXICON_FILE.name}: key written twice in one object: {', '.join(repeated)}")
    return dict(pairs)


LEXICON = json.loads(LEXICON_FILE.read_text(encoding="utf-8"), object_pairs_hook=_unique_keys)


@dataclass(frozen=True)
class Action:
    """A verb with the objects it usually takes, so a masked verb or object is guessable from the other."""

    past: str
    base: str
    objects: tuple[str, ...]


@dataclass(frozen=True)
class Measure:
    """A statement with a number `{n}` in [low, high] and the question it answers; floats mean one decimal."""

    statement: str
    question: str
    low: float
    high: float


@dataclass(frozen=True)
class Topic:
    """Everything one topic contributes to a sentence. Lexical fields hold words of this topic only."""

    name: str
    title: str  # put before a protagonist's name ("Dr.", "Chef"); "" for none
    roles: tuple[str, ...]
    orgs: tuple[str, ...]
    settings: tuple[str, ...]
    things: tuple[str, ...]  # singular or mass nouns: they are subjects of "was"
    quals: tuple[str, ...]  # adjectives that suit the things
    actions: tuple[Action, ...]
    measures: tuple[Measure, ...]
    facts: tuple[str, ...]  # topic-specific sentence templates


def _topic(entry: dict) -> Topic:
    """A topic from its lexicon entry: lists become tuples, and each "past/base": [objects] an Action."""
    fields = {key: tuple(value) if isinstance(value, list) else value for key, value in entry.items()}
    fields["actions"] = tuple(Action(*verbs.split("/"), tuple(objects)) for verbs, objects in entry["actions"].items())
    fields["measures"] = tuple(Measure(**measure) for measure in entry["measures"])
    return Topic(**fields)


TOPICS: tuple[Topic, ...] = tuple(_topic(entry) for entry in LEXICON["topics"])

# Shared words. A few names and places are non-ASCII on purpose, so Unicode handling is exercised.
FEMALE_NAMES = tuple(LEXICON["female_names"])
MALE_NAMES = tuple(LEXICON["male_names"])
SURNAMES = tuple(LEXICON["surnames"])
HONORIFICS = {gender: tuple(titles) for gender, titles in LEXICON["honorifics"].items()}
PERSON_ADJECTIVES = tuple(LEXICON["person_adjectives"])
PLACES = tuple(LEXICON["places"])
SEASONS = tuple(LEXICON["seasons"])
DAYS = tuple(LEXICON["days"])
DAY_PARTS = tuple(LEXICON["day_parts"])

# Templates. Slots are {name}; a capitalised slot name ({Who}) capitalises its value at sentence start.


@dataclass(frozen=True)
class Question:
    """A question about a sentence; its answer is the text that filled `slot` (only its entity when `entity`)."""

    text: str
    slot: str
    entity: bool = False


@dataclass(frozen=True)
class Template:
    """A sentence pattern with {slots}, and the questions a filled-in copy of it can answer."""

    text: str
    questions: tuple[Question, ...] = ()


def _template(entry: str | dict) -> Template:
    """A template from the lexicon: a plain string, or {"text", "questions"} for one that answers questions."""
    if isinstance(entry, str):
        return Template(entry)
    return Template(entry["text"], tuple(Question(**question) for question in entry["questions"]))


# The shared templates of each kind of sentence ("intro", "event", ..., "conclusion"), in lexicon order.
TEMPLATES = {kind: tuple(_template(entry) for entry in entries) for kind, entries in LEXICON["templates"].items()}
MEASURE_FRAMES = tuple(LEXICON["measure_frames"])

# How often each kind of sentence fills the middle of a document (weights, not probabilities).
MIDDLE_KINDS = {"event": 34, "fact": 18, "measure": 12, "dialogue": 10, "partner": 8, "abbreviation": 8,
                "question": 6}
# Paragraphs exist to test segmentation, so they get more abbreviations, quotes and questions.
PARAGRAPH_KINDS = {"event": 26, "fact": 14, "measure": 12, "dialogue": 14, "partner": 6, "abbreviation": 18,
                   "question": 10}

# ----------------------------------------------------------------------------------------------------
# Rendering: a template plus a slot filler gives a sentence with entity and slot offsets.
# ----------------------------------------------------------------------------------------------------

Segments = list  # list[tuple[str, str | None]]: text pieces, each with its entity tag or None
SLOT_RE = re.compile(r"\{(\w+)\}")


def plain(text: str) -> Segments:
    return [(text, None)]


def entity(text: str, tag: str) -> Segments:
    return [(text, tag)]


@dataclass
class Sentence:
    """One rendered sentence: its text, entity spans and the questions it answers (character offsets)."""

    text: str
    entities: list[tuple[int, int, str]] = field(default_factory=list)
    questions: list[tuple[str, int, int]] = field(default_factory=list)


@functools.lru_cache(maxsize=None)
def parse_template(template: str) -> tuple[tuple[str, bool, str, bool], ...]:
    """The template as (literal text, has a slot, slot name, capitalise the slot) steps, parsed once."""
    pieces = SLOT_RE.split(template) + [""]
    return tuple((pieces[i], i + 1 < len(pieces) - 1, pieces[i + 1][:1].lower() + pieces[i + 1][1:],
                  pieces[i + 1][:1].isupper()) for i in range(0, len(pieces) - 1, 2))


def render(template: str, fill: Callable[[str], Segments]) -> tuple[Sentence, dict[str, tuple[int, int]],
                                                                   dict[str, tuple[int, int]]]:
    """Fill every slot of `template`; return the sentence, each slot's span and each slot's entity span."""
    pieces: list[str] = []
    position = 0
    sentence = Sentence("")
    slot_spans: dict[str, tuple[int, int]] = {}
    entity_spans: dict[str, tuple[int, int]] = {}
    for literal, slot, name, capitalise in parse_template(template):
        pieces.append(literal)
        position += len(literal)
        if not slot:
            continue
        segments = fill(name)
        if capitalise:
            first_text, first_tag = segments[0]
            segments = [(first_text[:1].upper() + first_text[1:], first_tag), *segments[1:]]
        start = position
        for text, tag in segments:
            if tag:
                sentence.entities.append((position, position + len(text), tag))
                entity_spans.setdefault(name, (position, position + len(text)))
            pieces.append(text)
            position += len(text)
        slot_spans.setdefault(name, (start, position))
    sentence.text = "".join(pieces)
    return sentence, slot_spans, entity_spans


def render_text(template: str, values: dict[str, str]) -> str:
    """Fill a template from a dict of plain strings (for the fine-tuning sets, which need no offsets)."""
    sentence, _, _ = render(template, lambda name: plain(values[name]))
    return sentence.text


def with_article(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


# ----------------------------------------------------------------------------------------------------
# Documents: a cast, a clock that only moves forward, and sentences in narrative order.
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Person:
    first: str
    last: str
    gender: str  # "F" or "M", for pronouns and honorifics
    title: str

    @property
    def full_segments(self) -> Segments:
        name = entity(f"{self.first} {self.last}", "PER")
        return plain(self.title + " ") + name if self.title else name


def random_person(rng: random.Random, title: str = "") -> Person:
    gender = rng.choice(("F", "M"))
    first = rng.choice(FEMALE_NAMES if gender == "F" else MALE_NAMES)
    return Person(first, rng.choice(SURNAMES), gender, title)


@dataclass
class Cast:
    """Who and where a document is about; these recur in every sentence of it."""

    topic: Topic
    hero: Person
    partner: Person
    role: str
    partner_role: str
    home: str
    partner_home: str
    org: str
    partner_introduced: bool = False
    hero_mentioned: bool = False
    used_templates: set[str] = field(default_factory=set)  # a document repeats a template only when it must


def random_cast(rng: random.Random, topic: Topic) -> Cast:
    title = topic.title if topic.title and rng.random() < 0.6 else ""
    hero = random_person(rng, title)
    partner = random_person(rng)
    while partner.first == hero.first:
        partner = random_person(rng)
    home, partner_home = rng.sample(PLACES, 2)
    return Cast(topic, hero, partner, rng.choice(topic.roles), rng.choice(topic.roles), home, partner_home,
                rng.choice(topic.orgs))


class Clock:
    """Time phrases for a document that never go backwards, which gives its events a narrative order."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.day = rng.randrange(len(DAYS))
        self.part = rng.randrange(2)

    def advance(self) -> str:
        step = self.rng.choice((0, 1, 1, 2, 3, 4))
        if step == 0:
            return self.rng.choice(("Soon after", "A little later", f"Later that {DAY_PARTS[self.part]}"))
        new_part = self.part + step
        days_ahead, self.part = divmod(new_part, len(DAY_PARTS))
        part = DAY_PARTS[self.part]
        self.day = (self.day + days_ahead) % len(DAYS)
        if days_ahead == 0:
            return self.rng.choice((f"That {part}", f"In the {part}"))
        if days_ahead == 1 and self.rng.random() < 0.5:
            return f"The next {part}"
        return self.rng.choice((f"On {DAYS[self.day]}", f"On {DAYS[self.day]} {part}"))

    def later_day(self) -> str:
        return DAYS[(self.day + self.rng.randint(1, 3)) % len(DAYS)]


class SlotFiller:
    """Fills the slots of one sentence. Values are remembered, so a slot used twice (or in a question) agrees."""

    def __init__(self, rng: random.Random, cast: Cast, clock: Clock, measure: Measure | None = None):
        self.rng, self.cast, self.clock, self.measure = rng, cast, clock, measure
        self.topic = cast.topic
        self.values: dict[str, Segments] = {}
        self._actions: list[tuple[Action, str]] = []
        self._things: list[str] = []

    def __call__(self, name: str) -> Segments:
        if name not in self.values:
            self.values[name] = getattr(self, "slot_" + name)()
        return self.values[name]

    # People.
    def slot_full(self) -> Segments:
        self.cast.hero_mentioned = True
        return self.cast.hero.full_segments

    def slot_first(self) -> Segments:
        return entity(self.cast.hero.first, "PER")

    def slot_who(self) -> Segments:
        hero, roll = self.cast.hero, self.rng.random()
        if self.cast.hero_mentioned and roll < 0.2:
            return plain("she" if hero.gender == "F" else "he")
        if roll < 0.7:
            return entity(hero.first, "PER")
        if roll < 0.85 and hero.title:
            return plain(hero.title + " ") + entity(hero.last, "PER")
        return hero.full_segments

    def slot_partner(self) -> Segments:
        partner = self.cast.partner
        if self.cast.partner_introduced:
            return entity(partner.first, "PER")
        self.cast.partner_introduced = True
        return entity(f"{partner.first} {partner.last}", "PER")

    def slot_partner_first(self) -> Segments:
        return entity(self.cast.partner.first, "PER")

    def slot_mr(self) -> Segments:
        gender = self.rng.choice(("F", "M"))
        return plain(self.rng.choice(HONORIFICS[gender]) + " ") + entity(self.rng.choice(SURNAMES), "PER")

    def slot_role(self) -> Segments:
        return plain(self.cast.role)

    def slot_a_role(self) -> Segments:
        return plain(with_article(self.cast.role))

    def slot_a_role2(self) -> Segments:
        return plain(with_article(self.cast.partner_role))

    def slot_person_adj(self) -> Segments:
        return plain(self.rng.choice(PERSON_ADJECTIVES))

    # Places and organisations.
    def slot_loc(self) -> Segments:
        return entity(self.cast.home, "LOC")

    def slot_ploc(self) -> Segments:
        return entity(self.cast.partner_home, "LOC")

    def slot_loc2(self) -> Segments:
        place = self.rng.choice(PLACES)
        while place == self.cast.home:
            place = self.rng.choice(PLACES)
        return entity(place, "LOC")

    def slot_org(self) -> Segments:
        return entity(self.cast.org, "ORG")

    def slot_setting(self) -> Segments:
        return plain(self.rng.choice(self.topic.settings))

    # Topic words.
    def _thing(self, index: int) -> Segments:
        if not self._things:
            self._things = self.rng.sample(self.topic.things, 3)
        return plain(self._things[index])

    def slot_thing(self) -> Segments:
        return self._thing(0)

    def slot_thing2(self) -> Segments:
        return self._thing(1)

    def slot_thing3(self) -> Segments:
        return self._thing(2)

    def slot_qual(self) -> Segments:
        return plain(self.rng.choice(self.topic.quals))

    def slot_a_qual(self) -> Segments:
        return plain(with_article(self.rng.choice(self.topic.quals)))

    def _action(self, index: int) -> tuple[Action, str]:
        """The index-th action of this sentence with its object phrase ("crispy onions"); two differ."""
        while len(self._actions) <= index:
            action = self.rng.choice(self.topic.actions)
            if any(action is taken for taken, _ in self._actions):
                continue
            obj = f"{self.rng.choice(self.topic.quals)} {self.rng.choice(action.objects)}"
            self._actions.append((action, obj))
        return self._actions[index]

    def slot_verb(self) -> Segments:
        return plain(self._action(0)[0].past)

    def slot_base(self) -> Segments:
        return plain(self._action(0)[0].base)

    def slot_what(self) -> Segments:
        return plain(self._action(0)[1])

    def slot_verb2(self) -> Segments:
        return plain(self._action(1)[0].past)

    def slot_base2(self) -> Segments:
        return plain(self._action(1)[0].base)

    def slot_what2(self) -> Segments:
        return plain(self._action(1)[1])

    # Numbers and time.
    def slot_n(self) -> Segments:
        if self.measure is None:
            return plain(str(self.rng.randint(2, 60)))
        return plain(random_number(self.rng, self.measure.low, self.measure.high))

    def slot_x(self) -> Segments:
        return plain(random_number(self.rng, 1.5, 9.5))

    def slot_years(self) -> Segments:
        return plain(str(self.rng.randint(2, 30)))

    def slot_time(self) -> Segments:
        return plain(self.clock.advance())

    def slot_day(self) -> Segments:
        return plain(self.clock.later_day())

    def slot_season(self) -> Segments:
        return plain(self.rng.choice(SEASONS))


def random_number(rng: random.Random, low: float, high: float) -> str:
    """An integer in [low, high], or a one-decimal number ("3.5") when the bounds are floats."""
    if isinstance(low, float):
        return f"{rng.randint(round(low * 10), round(high * 10)) / 10:.1f}"
    return str(rng.randint(int(low), int(high)))


def pick_template(rng: random.Random, kind: str, topic: Topic) -> tuple[Template, Measure | None]:
    """A template of the given kind; measures and facts come from the topic, the rest are shared."""
    if kind == "measure":
        measure = rng.choice(topic.measures)
        frame = rng.choice(MEASURE_FRAMES).replace("{measure}", measure.statement)
        return Template(frame, (Question(measure.question, "n"),)), measure
    if kind == "fact":
        return Template(rng.choice(topic.facts)), None
    return rng.choice(TEMPLATES[kind]), None


def compose(rng: random.Random, kind: str, cast: Cast, clock: Clock, questions: bool = False) -> Sentence:
    """One sentence of `kind` about `cast`, of MIN_WORDS to MAX_WORDS words; with `questions`, those it answers."""
    while True:
        for _ in range(4):  # prefer a template this document has not used yet
            template, measure = pick_template(rng, kind, cast.topic)
            if template.text not in cast.used_templates:
                break
        cast.used_templates.add(template.text)
        fill = SlotFiller(rng, cast, clock, measure)
        sentence, slot_spans, entity_spans = render(template.text, fill)
        if MIN_WORDS <= len(sentence.text.split()) <= MAX_WORDS:
            break
    for question in template.questions if questions else ():
        spans = entity_spans if question.entity else slot_spans
        if question.slot in spans:  # "who" may have been a pronoun: then there is no name to answer with
            text, _, _ = render(question.text, fill)
            sentence.questions.append((text.text, *spans[question.slot]))
    return sentence


def weighted_choice(rng: random.Random, weights: dict[str, int]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def build_document(rng: random.Random, topic: Topic, n_sentences: int, kinds: dict[str, int] = MIDDLE_KINDS,
                   questions: bool = False) -> list[Sentence]:
    """A single-topic document: an introduction, `n_sentences - 2` middle sentences, then a conclusion."""
    cast = random_cast(rng, topic)
    clock = Clock(rng)
    kinds_in_order = ["intro", *(weighted_choice(rng, kinds) for _ in range(n_sentences - 2)), "conclusion"]
    return [compose(rng, kind, cast, clock, questions) for kind in kinds_in_order]


def document_length(rng: random.Random) -> int:
    """4 to 30 sentences: about one document in six is short."""
    return rng.randint(4, 7) if rng.random() < 0.17 else rng.randint(8, 30)


# ----------------------------------------------------------------------------------------------------
# Topic keywords: words that belong to exactly one topic, so a document's topic can be checked.
# ----------------------------------------------------------------------------------------------------

WORD_RE = re.compile(r"[^\W\d_]+")


def _words(texts: Sequence[str]) -> list[str]:
    """Lower-cased words of `texts`, ignoring template slot names such as {base}."""
    return [word for text in texts for word in WORD_RE.findall(SLOT_RE.sub(" ", text).lower())]


def _lexical_words(topic: Topic) -> list[str]:
    texts = [*topic.roles, *topic.settings, *topic.things, *topic.quals]
    for action in topic.actions:
        texts += [action.past, action.base, *action.objects]
    return [word for word in _words(texts) if word != "the"]


@functools.lru_cache(maxsize=None)
def topic_keywords() -> Mapping[str, frozenset[str]]:
    """For each topic, the words of its lexicon that no other topic's lexicon uses (read-only, computed once)."""
    lexicons = {topic.name: set(_lexical_words(topic)) for topic in TOPICS}
    keywords = {}
    for name, words in lexicons.items():
        others = set().union(*(other for other_name, other in lexicons.items() if other_name != name))
        keywords[name] = frozenset(words - others)
    return types.MappingProxyType(keywords)


def topics_in(text: str) -> list[str]:
    """The topics (in TOPICS order) whose keywords occur in `text`."""
    words = set(_words([text]))
    return [name for name, keywords in topic_keywords().items() if words & keywords]


def lexicon_conflicts() -> list[str]:
    """Places where a topic's keyword leaks into shared text or another topic's text; empty when clean.

    A leak would make a document look like two topics at once.
    """
    keywords = topic_keywords()
    templates = [template for group in TEMPLATES.values() for template in group]
    shared = [t.text for t in templates] + [q.text for t in templates for q in t.questions] + [
        *MEASURE_FRAMES, *FEMALE_NAMES, *MALE_NAMES, *SURNAMES, *PLACES, *PERSON_ADJECTIVES, *SEASONS, *DAYS,
        *DAY_PARTS, "soon after a little later later that next on in",
    ]
    problems = []
    for topic in TOPICS:
        own = [*topic.orgs, *topic.facts, topic.title]
        own += [text for measure in topic.measures for text in (measure.statement, measure.question)]
        for other in TOPICS:
            leaked = sorted(keywords[other.name] & set(_words(own))) if other is not topic else []
            if leaked:
                problems.append(f"{topic.name} text uses {other.name} keywords: {', '.join(leaked)}")
        leaked = sorted(keywords[topic.name] & set(_words(shared)))
        if leaked:
            problems.append(f"shared text uses {topic.name} keywords: {', '.join(leaked)}")
    return problems


# ----------------------------------------------------------------------------------------------------
# Products. Each builder returns {relative path: file text} and draws from its own random stream.
# ----------------------------------------------------------------------------------------------------


def stream(seed: int, product: str) -> random.Random:
    """An independent random stream per product, so changing one product leaves the others' bytes alone."""
    return random.Random(f"bertwb-sample-corpus/{seed}/{product}")


def build_pretrain(seed: int) -> dict[str, str]:
    """Shards in the original BERT format: a sentence per line, a blank line between documents.

    About one document in a hundred is repeated verbatim somewhere else, for de-duplication to remove.
    """
    rng = stream(seed, "pretrain")
    documents = []
    for index in range(PRETRAIN_DOCUMENTS):
        topic = TOPICS[index % len(TOPICS)] if index < len(TOPICS) else rng.choice(TOPICS)
        sentences = build_document(rng, topic, document_length(rng))
        documents.append("\n".join(sentence.text for sentence in sentences))
    originals = rng.sample(range(len(documents)), round(DUPLICATE_SHARE * len(documents)))
    for original in originals:
        documents.insert(rng.randrange(len(documents) + 1), documents[original])
    shard_size = -(-len(documents) // PRETRAIN_SHARDS)
    return {
        f"pretrain/part-{shard:03d}.txt": "\n\n".join(documents[shard * shard_size:(shard + 1) * shard_size]) + "\n"
        for shard in range(PRETRAIN_SHARDS)
    }


def build_paragraphs(seed: int) -> dict[str, str]:
    """Plain paragraphs (one per line, blank line between) and their gold sentences in BERT format.

    Each paragraph line is its gold sentences joined by single spaces, so a segmenter can be scored exactly.
    """
    rng = stream(seed, "paragraphs")
    paragraphs: list[list[str]] = []
    size = 0
    while size < PARAGRAPH_BYTES:
        sentences = [s.text for s in build_document(rng, rng.choice(TOPICS), rng.randint(5, 14), PARAGRAPH_KINDS)]
        while sentences:
            take = rng.randint(2, 6)
            paragraphs.append(sentences[:take])
            sentences = sentences[take:]
            size += len(" ".join(paragraphs[-1]).encode()) + 2
    return {
        "paragraphs/sample.txt": "\n\n".join(" ".join(paragraph) for paragraph in paragraphs) + "\n",
        "paragraphs/sample.sentences.txt": "\n\n".join("\n".join(paragraph) for paragraph in paragraphs) + "\n",
    }


def unique_examples(make: Callable[[random.Random, int], tuple], rng: random.Random, count: int,
                    seen: set) -> list[tuple]:
    """`count` examples from `make(rng, index)` whose first field is new; added to `seen` so splits stay disjoint."""
    examples: list[tuple] = []
    while len(examples) < count:
        example = make(rng, len(examples))
        if example[0] not in seen:
            seen.add(example[0])
            examples.append(example)
    return examples


# Sentiment: reviews whose label follows from their evaluative words (with some negation and contrast).
SENTIMENT = LEXICON["sentiment"]
POSITIVE_WORDS = tuple(SENTIMENT["positive_words"])
NEGATIVE_WORDS = tuple(SENTIMENT["negative_words"])
POSITIVE_VERDICTS = tuple(SENTIMENT["positive_verdicts"])
NEGATIVE_VERDICTS = tuple(SENTIMENT["negative_verdicts"])
SENTIMENT_TEMPLATES = tuple(SENTIMENT["templates"])


def make_sentiment(rng: random.Random, index: int) -> tuple[str, str]:
    """One review; labels alternate so the classes are balanced."""
    label = ("negative", "positive")[index % 2]
    good = label == "positive"
    topic = rng.choice(TOPICS)
    words, opposite = (POSITIVE_WORDS, NEGATIVE_WORDS) if good else (NEGATIVE_WORDS, POSITIVE_WORDS)
    adj, adj2 = rng.sample(words, 2)
    thing, thing2 = rng.sample(topic.things, 2)
    values = {
        "thing": thing, "thing2": thing2, "qual": rng.choice(topic.quals), "org": rng.choice(topic.orgs),
        "loc": rng.choice(PLACES), "adj": adj, "adj2": adj2, "opp": rng.choice(opposite),
        "verdict": rng.choice(POSITIVE_VERDICTS if good else NEGATIVE_VERDICTS),
        "stars": rng.choice(("five stars", "four stars") if good else ("one star", "two stars")),
        # Negation flips the word: "not wonderful" is negative, "nothing dreadful" is positive.
        "negated": f"nothing short of {adj}" if good else f"not {rng.choice(opposite)} at all",
    }
    return render_text(rng.choice(SENTIMENT_TEMPLATES), values), label


# Pairs: small natural-language inference. The premise states who did what, where and when.
NLI_PREMISES = tuple(LEXICON["nli"]["premises"])
NLI_HYPOTHESES = {label: tuple(texts) for label, texts in LEXICON["nli"]["hypotheses"].items()}
NLI_LABELS = tuple(NLI_HYPOTHESES)  # in lexicon order; examples cycle through them, so the classes balance


def make_nli(rng: random.Random, index: int) -> tuple[str, str, str]:
    """A premise/hypothesis pair; labels cycle so the three classes are balanced."""
    label = NLI_LABELS[index % 3]
    topic = rng.choice(TOPICS)
    person = random_person(rng)
    action, action2 = rng.sample(topic.actions, 2)
    obj = rng.choice(action.objects)
    loc, other_loc = rng.sample(PLACES, 2)
    values = {
        "per": f"{person.first} {person.last}", "first": person.first, "a_role": with_article(rng.choice(topic.roles)),
        "verb": action.past, "base": action.base, "obj": obj, "what": f"{rng.choice(topic.quals)} {obj}",
        "verb2": action2.past, "what2": f"{rng.choice(topic.quals)} {rng.choice(action2.objects)}",
        "loc": loc, "other_loc": other_loc, "day": rng.choice(DAYS), "org": rng.choice(topic.orgs),
        "season": rng.choice(SEASONS),
    }
    premise = render_text(rng.choice(NLI_PREMISES), values)
    return premise, render_text(rng.choice(NLI_HYPOTHESES[label]), values), label


def build_classification(seed: int) -> dict[str, str]:
    """sentiment_{train,dev}.csv and pairs_{train,dev}.tsv, balanced, with no text shared between splits."""
    files = {}
    for name, make, header, suffix, delimiter in (
        ("sentiment", make_sentiment, ("text", "label"), "csv", ","),
        ("pairs", make_nli, ("sentence1", "sentence2", "label"), "tsv", "\t"),
    ):
        seen: set = set()
        for split, count in SPLIT_SIZES.items():
            rows = unique_examples(make, stream(seed, f"{name}/{split}"), count, seen)
            buffer = io.StringIO()
            writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(rows)
            files[f"finetune/{name}_{split}.{suffix}"] = buffer.getvalue()
    return files


# Token classification.
TOKEN_RE = re.compile(r"(?:Dr|Mr|Mrs|Ms|St)\.|e\.g\.|i\.e\.|\d+(?:\.\d+)?|\w+(?:['-]\w+)*|[^\w\s]")


def bio_tokens(sentence: Sentence) -> list[tuple[str, str]]:
    """The sentence as (token, BIO tag) pairs; entity spans always start and end on token boundaries."""
    tagged: list[tuple[str, str]] = []
    position = 0
    for start, end, tag in [*sentence.entities, (len(sentence.text), len(sentence.text), "")]:
        tagged += [(token, "O") for token in TOKEN_RE.findall(sentence.text[position:start])]
        tokens = TOKEN_RE.findall(sentence.text[start:end])
        tagged += [(token, ("B-" if i == 0 else "I-") + tag) for i, token in enumerate(tokens)]
        position = end
    return tagged


NER_KINDS = {**MIDDLE_KINDS, "intro": 8, "conclusion": 8}


def make_ner(rng: random.Random, index: int) -> tuple[str, list[tuple[str, str]]]:
    """A sentence of any kind, about a fresh cast, that names at least one person, place or organisation."""
    while True:
        cast = random_cast(rng, rng.choice(TOPICS))
        cast.hero_mentioned = True  # as if mid-document, so pronouns occur too
        sentence = compose(rng, weighted_choice(rng, NER_KINDS), cast, Clock(rng))
        if sentence.entities:
            return sentence.text, bio_tokens(sentence)


def build_ner(seed: int) -> dict[str, str]:
    """ner_{train,dev}.conll: "token TAG" lines, a blank line between sentences."""
    files, seen = {}, set()
    for split, count in SPLIT_SIZES.items():
        examples = unique_examples(make_ner, stream(seed, f"ner/{split}"), count, seen)
        blocks = ["\n".join(f"{token} {tag}" for token, tag in tagged) for _, tagged in examples]
        files[f"finetune/ner_{split}.conll"] = "\n\n".join(blocks) + "\n"
    return files


# Question answering.
def make_qa_paragraph(rng: random.Random, topic: Topic) -> tuple[str, list[tuple[str, str, int]]]:
    """A short document as one context and up to three questions about it, with exact answer offsets.

    A question asked twice in one context is dropped, because its answer would be ambiguous.
    """
    sentences = build_document(rng, topic, rng.randint(5, 8), questions=True)
    context, candidates = "", []
    for sentence in sentences:
        offset = len(context) + (1 if context else 0)
        context = f"{context} {sentence.text}" if context else sentence.text
        candidates += [(question, start + offset, end + offset) for question, start, end in sentence.questions]
    counts: dict[str, int] = {}
    for question, _, _ in candidates:
        counts[question] = counts.get(question, 0) + 1
    unique = [candidate for candidate in candidates if counts[candidate[0]] == 1]
    chosen = rng.sample(unique, min(3, len(unique)))
    return context, [(question, context[start:end], start) for question, start, end in chosen]


def build_qa(seed: int) -> dict[str, str]:
    """qa_{train,dev}.json in SQuAD v1.1 format, one article per topic."""
    files = {}
    for split, count in QA_QUESTIONS.items():
        rng = stream(seed, f"qa/{split}")
        articles = {topic.name: [] for topic in TOPICS}
        asked = 0
        while asked < count:
            topic = rng.choice(TOPICS)
            context, questions = make_qa_paragraph(rng, topic)
            questions = questions[:count - asked]
            if not questions:
                continue
            qas = [{"id": f"{split}-{asked + i:05d}", "question": question,
                    "answers": [{"text": answer, "answer_start": start}]}
                   for i, (question, answer, start) in enumerate(questions)]
            articles[topic.name].append({"context": context, "qas": qas})
            asked += len(qas)
        data = [{"title": name, "paragraphs": paragraphs} for name, paragraphs in articles.items() if paragraphs]
        files[f"finetune/qa_{split}.json"] = json.dumps({"version": "1.1", "data": data}, ensure_ascii=False,
                                                        indent=1) + "\n"
    return files


# ----------------------------------------------------------------------------------------------------
# README, writing and checking.
# ----------------------------------------------------------------------------------------------------


def corpus_statistics(files: dict[str, str]) -> dict[str, float]:
    """Counts over the pretraining shards: documents, sentences, duplicates, words per sentence."""
    documents = [doc for path, text in files.items() if path.startswith("pretrain/")
                 for doc in text.rstrip("\n").split("\n\n")]
    sentences = [line for doc in documents for line in doc.split("\n")]
    lengths = [len(sentence.split()) for sentence in sentences]
    words = [word for sentence in sentences for word in sentence.split()]
    return {
        "documents": len(documents),
        "duplicates": len(documents) - len(dict.fromkeys(documents)),
        "sentences": len(sentences),
        "min_words": min(lengths), "max_words": max(lengths), "mean_words": sum(lengths) / len(lengths),
        "non_ascii_sentences": sum(1 for s in sentences if not s.isascii()) / len(sentences),
        "non_ascii_words": sum(1 for w in words if not w.isascii()) / len(words),
    }


def build_readme(seed: int, files: dict[str, str]) -> str:
    stats = corpus_statistics(files)
    sizes = "\n".join(f"| `{path}` | {len(text.encode()):,} | {describe(path, text)} |"
                      for path, text in sorted(files.items()))
    total = sum(len(text.encode()) for path, text in files.items() if path.startswith("pretrain/"))
    topics = textwrap.fill(", ".join(topic.name for topic in TOPICS), width=100)
    seed_option = "" if seed == DEFAULT_SEED else f" --seed {seed}"
    return f"""# Sample corpus

Synthetic text for trying and testing every bertwb stage on a laptop: pretraining text in the original
BERT format, plain paragraphs for sentence segmentation, and small labelled sets for fine-tuning.
Everything else here is written by `generate.py` (Python standard library only) from the words and
templates in `lexicon.json`, and is byte-for-byte reproducible; this README is generated too, so edit the
script or the lexicon rather than the files.

    python sample_corpus/generate.py{seed_option}          # rewrite everything in this folder
    python sample_corpus/generate.py --check  # exit 1, naming the first file that differs from a fresh run

## How the text is made

Each document is about one of {len(TOPICS)} topics:
{topics}.

Its sentences come from a small grammar: shared narrative templates (an introduction, events, dialogue,
questions, measurements, a conclusion) filled with the topic's own nouns, verbs and the objects those verbs
usually take, adjectives, roles and organisations, plus shared person names, places, days and numbers.
A document follows one protagonist (sometimes with a title such as "Dr." or "Captain") and a partner, in
one home town, through time phrases that only move forward. So a masked word can be guessed from the topic
and the syntax around it, and two consecutive sentences share a topic and a person while a sentence from
another document usually does not: what a tiny BERT needs to learn masked-LM and next-sentence prediction
in a few CPU minutes.

The text is deliberately not all plain ASCII or plain prose: names and places such as "Zürich", "São
Paulo", "Chloé" or "Dvořák" and words such as "café", "crème brûlée" and "naïve"; quotations and
questions; integers, negative numbers and decimals ("3.5"); abbreviations inside sentences ("Dr.", "Mr.",
"Mrs.", "St.", "e.g.", "i.e.").

## Pretraining text: `pretrain/part-*.txt`

One sentence per line, one blank line between documents, UTF-8 with a final newline.

- {stats['documents']:,} documents, {stats['sentences']:,} sentences, {total:,} bytes in {PRETRAIN_SHARDS} shards.
- 4 to 30 sentences per document (about one in six has 4–7);
  {stats['min_words']} to {stats['max_words']} words per sentence, {stats['mean_words']:.1f} on average.
- {stats['duplicates']} documents are exact copies of another document, placed elsewhere on purpose,
  so de-duplication has something to remove.
- {stats['non_ascii_words']:.1%} of the words and {stats['non_ascii_sentences']:.0%} of the sentences contain
  a non-ASCII character (mostly names and places, which recur within a document).

## Paragraphs: `paragraphs/`

`sample.txt` holds plain paragraphs, one per line with a blank line between them, made by the same grammar
with more abbreviations, quotations and questions. `sample.sentences.txt` is the gold segmentation in the
pretraining format: paragraph *k* of `sample.txt` is exactly the sentences of block *k* joined by single
spaces. Hard cases on purpose: titles before names ("Dr. Novak", "Mrs. Costa"), "St. Ives", "e.g. the ...",
"i.e. ...", decimals ("7.5 hours"), and quotations that end in a question mark but not the sentence
(`"Is this crispy enough?" Marta asked.`).

## Fine-tuning sets: `finetune/`

Each task has a train and a dev split; no example text occurs in both.

- `sentiment_*.csv` — single-sentence classification. Header `text,label`; label `negative` or
  `positive` (balanced). Short reviews of topic things ("The crème brûlée at Café Lumière was superb.").
  The label follows from evaluative words and verdicts, with some negation ("not wonderful at all") and
  contrast ("The X was awful, but the Y was lovely, so overall ...": the second half decides).
- `pairs_*.tsv` — sentence-pair classification as natural-language inference. Header
  `sentence1<TAB>sentence2<TAB>label`; label `entailment`, `contradiction` or `neutral` (balanced).
  The premise says who did what, where and when. Entailments restate part of it; contradictions negate it
  or place the person elsewhere that day; neutral hypotheses add something the premise does not say.
- `ner_*.conll` — token classification. One `token TAG` per line, a blank line between sentences, BIO tags
  over `PER`, `LOC` and `ORG`. Titles and honorifics ("Dr.", "Mrs.") are outside the entity, as in CoNLL-2003;
  multi-word names ("São Paulo", "Rio de Janeiro", "Café Lumière") are one entity.
- `qa_*.json` — extractive question answering in SQuAD v1.1 format, one article per topic. Every context
  is a short generated document, every question has one answer, and
  `context[answer_start:answer_start + len(text)] == text` holds for all of them.

## Files

| file | bytes | contents |
|---|---:|---|
{sizes}

Generated with seed {seed}.
"""


def describe(path: str, text: str) -> str:
    """A short count for the README's file table."""
    blocks = text.rstrip("\n").split("\n\n")
    lines = sum(1 for line in text.splitlines() if line)
    if path.startswith("pretrain/"):
        return f"{len(blocks):,} documents, {lines:,} sentences"
    if path == "paragraphs/sample.txt":
        return f"{len(blocks):,} paragraphs"
    if path.endswith(".txt") or path.endswith(".conll"):
        return f"{len(blocks):,} {'paragraphs' if path.endswith('.txt') else 'sentences'}, {lines:,} " + (
            "sentences" if path.endswith(".txt") else "tokens")
    if path.endswith(".json"):
        questions = sum(len(p["qas"]) for article in json.loads(text)["data"] for p in article["paragraphs"])
        return f"{questions:,} questions"
    return f"{text.count(chr(10)) - 1:,} examples"


def build_all(seed: int = DEFAULT_SEED) -> dict[str, bytes]:
    """Every output file, as {path relative to the corpus folder: bytes}."""
    files: dict[str, str] = {}
    for build in (build_pretrain, build_paragraphs, build_classification, build_ner, build_qa):
        files.update(build(seed))
    files["README.md"] = build_readme(seed, files)
    return {path: text.encode("utf-8") for path, text in sorted(files.items())}


MANAGED_DIRS = ("pretrain", "paragraphs", "finetune")


def stale_files(out: Path, expected: dict[str, bytes]) -> list[str]:
    """Files in the generated folders that the generator no longer writes (e.g. a shard from a bigger run)."""
    found = [path.relative_to(out).as_posix() for folder in MANAGED_DIRS if (out / folder).is_dir()
             for path in sorted((out / folder).iterdir()) if path.is_file()]
    return [path for path in found if path not in expected]


def first_difference(out: Path, expected: dict[str, bytes]) -> str | None:
    """A one-line description of the first way `out` differs from `expected`, or None when it matches."""
    for path, content in expected.items():
        target = out / path
        if not target.is_file():
            return f"{path} is missing"
        if target.read_bytes() != content:
            return f"{path} differs from a fresh regeneration"
    extra = stale_files(out, expected)
    return f"{extra[0]} is not written by the generator" if extra else None


def write_all(out: Path, files: dict[str, bytes]) -> None:
    """Write every file under `out` and remove stale files from the generated folders."""
    for path in stale_files(out, files):
        (out / path).unlink()
    for path, content in files.items():
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate bertwb's deterministic sample corpus.")
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: this script's folder)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default: {DEFAULT_SEED})")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the files in --out differ from a fresh regeneration")
    args = parser.parse_args(argv)
    files = build_all(args.seed)
    if args.check:
        difference = first_difference(args.out, files)
        if difference:
            seed_option = "" if args.seed == DEFAULT_SEED else f" --seed {args.seed}"
            print(f"sample corpus is out of date: {difference}; run python sample_corpus/generate.py{seed_option}",
                  file=sys.stderr)
            return 1
        print(f"sample corpus is up to date: {len(files)} files match a fresh regeneration")
        return 0
    write_all(args.out, files)
    total = sum(len(content) for content in files.values())
    print(f"wrote {len(files)} files ({total:,} bytes) under {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
