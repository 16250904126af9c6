#!/usr/bin/env python3
"""Generate bertwb's sample corpus: synthetic, deterministic text for every stage of the pipeline.

    python sample_corpus/generate.py            # (re)write everything next to this script
    python sample_corpus/generate.py --check    # exit 1 if the committed files differ from a regeneration

Every sentence comes from a small grammar: generic narrative templates filled with the words of one
topic (nouns, verbs with their usual objects, adjectives, roles, organisations) plus shared names,
places and numbers. A tiny BERT can therefore learn masked words from topic and syntax, and next-sentence
prediction from the topic and the protagonist that recur through a document.

Standard library only. The output depends on nothing but the seed: each product draws from its own
`random.Random` seeded with a string, and no set or `hash()` order ever reaches the output.
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

# Sizes of the products. The pretraining text lands near 2.5 MB with these.
PRETRAIN_DOCUMENTS = 1800
PRETRAIN_SHARDS = 4
DUPLICATE_SHARE = 0.01  # exact copies of documents, for de-duplication to find
PARAGRAPH_BYTES = 75_000
SPLIT_SIZES = {"train": 2000, "dev": 300}
QA_QUESTIONS = {"train": 1200, "dev": 300}  # fewer: every question carries a paragraph of context
MIN_WORDS, MAX_WORDS = 6, 35  # words per sentence, split on whitespace

# ----------------------------------------------------------------------------------------------------
# The lexicon: one entry per topic.
# ----------------------------------------------------------------------------------------------------


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


def _list(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _actions(*specs: str) -> tuple[Action, ...]:
    """Parse "past/base: object, object" lines."""
    actions = []
    for spec in specs:
        verbs, objects = spec.split(":")
        past, base = verbs.split("/")
        actions.append(Action(past.strip(), base.strip(), _list(objects)))
    return tuple(actions)


def _measures(*specs: tuple[str, str, float, float]) -> tuple[Measure, ...]:
    return tuple(Measure(*spec) for spec in specs)


TOPICS: tuple[Topic, ...] = (
    Topic(
        name="cooking",
        title="Chef",
        roles=_list("chef, baker, pastry cook, sous-chef"),
        orgs=_list("Golden Spoon Bistro, Café Lumière, Saffron House, Blue Plate Brasserie"),
        settings=_list("the kitchen, the bakery, the market hall, the pantry"),
        things=_list("sauce, soup, bread, dough, risotto, omelette, stew, crème brûlée, pastry, casserole, "
                     "purée, gravy, pie, dumpling"),
        quals=_list("crispy, creamy, golden, spicy, tender, savoury, buttery, fragrant, zesty"),
        actions=_actions(
            "chopped/chop: onions, garlic, parsley, carrots",
            "baked/bake: bread, pie, sourdough loaf, croissants",
            "stirred/stir: sauce, risotto, gravy",
            "spiced/spice: stew, soup, casserole",
            "kneaded/knead: dough, pastry",
            "whisked/whisk: eggs, cream, batter",
            "roasted/roast: potatoes, chicken, aubergines",
            "simmered/simmer: stock, soup, stew",
            "grated/grate: cheese, nutmeg, lemon zest",
            "tasted/taste: sauce, purée, gravy",
        ),
        measures=_measures(
            ("the oven had reached {n} degrees", "How many degrees had the oven reached?", 160, 250),
            ("the dough had rested for {n} minutes", "How many minutes had the dough rested?", 20, 90),
            ("the recipe called for {n} grams of butter", "How many grams of butter did the recipe call for?",
             50, 400),
            ("the stock had reduced by {n} litres", "By how many litres had the stock reduced?", 0.5, 4.5),
        ),
        facts=(
            "A good {thing} needs patience, a hot pan and a pinch of salt.",
            "The menu at {org} changes every season, but the {qual} {thing} always stays.",
            "{Who} believes that fresh herbs matter more than an expensive knife.",
            "In {setting}, the smell of garlic and warm butter filled the air.",
            "The café next door sold {n} cups of coffee before lunch.",
            "Guests at {org} ordered the {qual} {thing} more than any other dish.",
            "Nobody in {setting} dared to touch the {thing} until it had cooled.",
        ),
    ),
    Topic(
        name="weather",
        title="",
        roles=_list("meteorologist, forecaster, storm chaser, climatologist"),
        orgs=_list("Northern Forecast Centre, Coastal Weather Office, Skyline Climate Institute, Valley Met Bureau"),
        settings=_list("the weather station, the radar room, the forecast office, the rooftop platform"),
        things=_list("forecast, thunderstorm, drizzle, hailstorm, cold front, humidity, barometer, rainfall, "
                     "snowfall, heatwave, fog, cloud cover, rain gauge, frost"),
        quals=_list("humid, stormy, foggy, chilly, overcast, muggy, drizzly, blustery, frosty"),
        actions=_actions(
            "forecast/forecast: thunderstorm, heatwave, snowfall",
            "monitored/monitor: cold front, cloud cover, humidity",
            "issued/issue: storm warning, frost warning, flood alert",
            "calibrated/calibrate: barometer, rain gauge, anemometer",
            "logged/log: rainfall, snowfall, temperature",
            "plotted/plot: isobars, weather map, storm path",
        ),
        measures=_measures(
            ("the temperature had dropped to {n} degrees", "To what temperature had the air dropped?", -12, 9),
            ("the rain gauge showed {n} centimetres of rain", "How many centimetres of rain did the rain gauge show?",
             0.5, 9.5),
            ("the gusts reached {n} kilometres per hour", "How many kilometres per hour did the gusts reach?",
             40, 140),
            ("the humidity went up to {n} percent", "To how many percent did the humidity go up?", 60, 99),
        ),
        facts=(
            "The forecast for {loc} promised {qual} skies and a cold front by evening.",
            "{Who} has never trusted a barometer that has not been checked for a month.",
            "Rain gauges at {org} are emptied at nine every morning.",
            "A {qual} morning often turns into a thunderstorm by late afternoon.",
            "Farmers near {loc} call the office whenever the frost warning changes.",
            "The radar showed a band of drizzle moving slowly towards {loc}.",
        ),
    ),
    Topic(
        name="sailing",
        title="Captain",
        roles=_list("sailor, skipper, navigator, deckhand"),
        orgs=_list("Blue Anchor Yacht Club, Westwind Marina, Seagull Regatta Society, Pelican Bay Sailing School"),
        settings=_list("the harbour, the marina, the quayside, the cabin"),
        things=_list("yacht, mainsail, jib, rudder, anchor, tiller, hull, mast, compass, keel, dinghy, mooring, "
                     "spinnaker, bow"),
        quals=_list("seaworthy, breezy, choppy, nautical, sleek, buoyant, windward, leeward"),
        actions=_actions(
            "hoisted/hoist: mainsail, spinnaker, jib",
            "trimmed/trim: jib, mainsail",
            "reefed/reef: mainsail, foresail",
            "steered/steer: yacht, dinghy",
            "anchored/anchor: yacht, dinghy",
            "coiled/coil: ropes, halyards, sheets",
            "navigated/navigate: channel, strait, sandbar",
            "scrubbed/scrub: hull, deck",
        ),
        measures=_measures(
            ("the wind had risen to {n} knots", "To how many knots had the wind risen?", 8, 35),
            ("the yacht had covered {n} nautical miles", "How many nautical miles had the yacht covered?", 12, 180),
            ("the waves were {n} metres high", "How many metres high were the waves?", 0.5, 6.5),
        ),
        facts=(
            "A {qual} yacht is only as good as the crew that sails it.",
            "{Who} always checks the compass twice before leaving {setting}.",
            "The regatta at {org} draws sailors from as far away as {loc2}.",
            "Old sailors in {loc} say a red sky at night means a calm passage.",
            "The tide turned, and the dinghy drifted towards the harbour wall.",
            "Every knot in the rigging had been tied by hand.",
        ),
    ),
    Topic(
        name="astronomy",
        title="Dr.",
        roles=_list("astronomer, astrophysicist, telescope operator, stargazer"),
        orgs=_list("Clearwater Observatory, Orion Space Institute, Highfield Planetarium, Kepler Sky Society"),
        settings=_list("the observatory, the dome, the control room, the roof terrace"),
        things=_list("telescope, galaxy, nebula, comet, asteroid, eclipse, planet, supernova, star chart, "
                     "meteor shower, lens, orbit, constellation, moon"),
        quals=_list("faint, distant, luminous, celestial, cosmic, lunar, stellar, dim"),
        actions=_actions(
            "observed/observe: comet, nebula, eclipse",
            "photographed/photograph: galaxy, moon, meteor shower",
            "catalogued/catalogue: asteroids, variable stars",
            "aligned/align: telescope, mirror",
            "focused/focus: telescope, lens",
            "detected/detect: supernova, exoplanet",
            "charted/chart: orbit, constellations",
        ),
        measures=_measures(
            ("the comet was {n} million kilometres away", "How many million kilometres away was the comet?",
             1.5, 95.5),
            ("the telescope mirror measured {n} centimetres", "How many centimetres did the telescope mirror measure?",
             20, 250),
            ("the sky showed {n} meteors an hour", "How many meteors an hour did the sky show?", 10, 120),
        ),
        facts=(
            "On a clear night above {loc}, the galaxy stretches from one horizon to the other.",
            "A {qual} comet can stay visible for weeks before it fades.",
            "{Who} keeps a notebook of every eclipse seen from {loc}.",
            "The dome at {org} opens only on clear, still nights.",
            "Light from the nebula left it thousands of years ago.",
            "Astronomers at {org} argued about the orbit for {n} minutes.",
        ),
    ),
    Topic(
        name="gardening",
        title="",
        roles=_list("gardener, horticulturist, landscaper, allotment keeper"),
        orgs=_list("Green Thumb Society, Rosewood Nursery, Meadowbank Allotments, Hillside Botanic Garden"),
        settings=_list("the greenhouse, the allotment, the vegetable patch, the potting shed"),
        things=_list("compost, seedling, hedge, lawn, flowerbed, trellis, wheelbarrow, greenhouse, soil, orchard, "
                     "rose bush, sunflower, vine, garden hose"),
        quals=_list("leafy, blooming, fertile, thorny, lush, wilted, sprouting, overgrown, verdant"),
        actions=_actions(
            "planted/plant: tulip bulbs, seedlings, sunflowers",
            "watered/water: seedlings, flowerbed, tomato plants",
            "pruned/prune: rose bush, hedge, apple trees",
            "weeded/weed: flowerbed, vegetable patch",
            "harvested/harvest: courgettes, beans, strawberries",
            "mulched/mulch: borders, flowerbed",
            "sowed/sow: seeds, lettuce, radishes",
            "repotted/repot: orchids, cuttings",
            "mowed/mow: lawn",
        ),
        measures=_measures(
            ("the sunflowers had grown to {n} metres", "How many metres had the sunflowers grown to?", 1.5, 3.5),
            ("the allotment produced {n} kilograms of beans", "How many kilograms of beans did the allotment produce?",
             5, 60),
            ("the greenhouse held {n} seedlings", "How many seedlings did the greenhouse hold?", 40, 400),
        ),
        facts=(
            "Good soil is half the work, and compost is the other half.",
            "{Who} swears that tomato plants grow faster when you talk to them.",
            "The hedge along {setting} had not been pruned since spring.",
            "Slugs ate {n} of the young lettuces in a single night.",
            "Visitors to {org} always ask about the {qual} rose bush by the gate.",
            "A wheelbarrow full of compost waited beside the flowerbed.",
        ),
    ),
    Topic(
        name="football",
        title="Coach",
        roles=_list("striker, goalkeeper, midfielder, football coach"),
        orgs=_list("Riverside Rovers, Northgate United, Atlético Costa Verde, Kingsbridge Athletic"),
        settings=_list("the pitch, the stadium, the training ground, the dressing room"),
        things=_list("ball, goal, penalty, corner kick, free kick, offside trap, match, tournament, jersey, "
                     "scoreboard, crossbar, league table, whistle, goalpost"),
        quals=_list("tactical, defensive, attacking, muddy, unbeaten, acrobatic, decisive, thrilling"),
        actions=_actions(
            "scored/score: penalty, equaliser, winning goal",
            "kicked/kick: ball, free kick",
            "tackled/tackle: winger, striker",
            "defended/defend: lead, penalty area",
            "dribbled/dribble: ball",
            "coached/coach: youth team, defenders",
            "saved/save: penalty, header",
            "crossed/cross: ball",
        ),
        measures=_measures(
            ("the crowd had grown to {n} fans", "How many fans had the crowd grown to?", 800, 60000),
            ("the striker had scored {n} goals this season", "How many goals had the striker scored this season?",
             3, 40),
            ("the kick-off had been pushed back by {n} minutes",
             "By how many minutes had the kick-off been pushed back?", 5, 45),
        ),
        facts=(
            "The {qual} tactics of {org} surprised everyone in the league.",
            "{Who} spent the whole week practising free kicks after training.",
            "Fans in {loc} still talk about the penalty in the last minute.",
            "The pitch was so muddy that the ball barely rolled.",
            "A draw would have been enough, but {org} wanted to win.",
            "The referee blew the whistle and the stadium fell silent.",
        ),
    ),
    Topic(
        name="music",
        title="",
        roles=_list("violinist, composer, conductor, pianist, cellist"),
        orgs=_list("Silverlake Philharmonic, Blue Note Jazz Club, Riverside Conservatory, Harmony Records"),
        settings=_list("the concert hall, the rehearsal room, the recording studio, the bandstand"),
        things=_list("violin, piano, cello, symphony, melody, chord, rhythm, orchestra, sonata, tempo, choir, "
                     "metronome, concerto, sheet music"),
        quals=_list("melodic, rhythmic, lyrical, tuneful, soulful, orchestral, acoustic, upbeat"),
        actions=_actions(
            "rehearsed/rehearse: sonata, symphony, duet",
            "composed/compose: melody, waltz, lullaby",
            "tuned/tune: violin, cello, piano",
            "conducted/conduct: orchestra, choir",
            "sang/sing: aria, chorus",
            "strummed/strum: guitar, chords",
            "recorded/record: album, concerto",
            "arranged/arrange: medley, overture",
        ),
        measures=_measures(
            ("the orchestra had rehearsed for {n} hours", "For how many hours had the orchestra rehearsed?", 2, 9),
            ("the symphony lasted {n} minutes", "How many minutes did the symphony last?", 25, 80),
            ("the tempo was set to {n} beats per minute", "At how many beats per minute was the tempo set?", 60, 180),
        ),
        facts=(
            "The {qual} melody stayed in everyone's head long after the concert.",
            "{Who} practises scales for an hour before breakfast.",
            "Critics in {loc} praised the orchestra for its {qual} second movement.",
            "Nobody at {org} had heard the piano sound so warm.",
            "A single wrong chord can ruin an entire sonata.",
            "The choir sang the final chorus twice because the audience would not stop clapping.",
        ),
    ),
    Topic(
        name="chemistry",
        title="Dr.",
        roles=_list("chemist, lab technician, biochemist, research chemist"),
        orgs=_list("Bright Molecule Laboratories, Institute of Applied Chemistry, Catalyst Works, "
                   "Northfield Chemical Society"),
        settings=_list("the laboratory, the fume cupboard, the clean room, the storeroom"),
        things=_list("beaker, flask, solution, reagent, catalyst, precipitate, compound, pipette, burette, crystal, "
                     "acid, molecule, centrifuge, spectrometer"),
        quals=_list("acidic, volatile, soluble, crystalline, alkaline, inert, viscous, reactive"),
        actions=_actions(
            "titrated/titrate: acid, solution",
            "distilled/distil: solvent, ethanol",
            "synthesised/synthesise: compound, polymer",
            "filtered/filter: precipitate, mixture",
            "weighed/weigh: powder, crystals",
            "diluted/dilute: acid, sample",
            "heated/heat: flask, solution",
            "crystallised/crystallise: copper sulfate, sodium acetate",
            "analysed/analyse: sample, residue",
        ),
        measures=_measures(
            ("the solution had a pH of {n}", "What pH did the solution have?", 1.5, 12.5),
            ("the flask was heated to {n} degrees", "To how many degrees was the flask heated?", 40, 180),
            ("the reaction took {n} minutes to finish", "How many minutes did the reaction take to finish?", 5, 90),
        ),
        facts=(
            "A {qual} reagent must always be stored in the fume cupboard.",
            "{Who} labels every flask twice, because a mistake with acid is never small.",
            "The laboratory at {org} smells faintly of vinegar and solvent.",
            "Safety goggles hang on a hook beside every bench in {setting}.",
            "The catalyst made the reaction {n} times faster.",
            "Nobody could explain why the precipitate had turned blue.",
        ),
    ),
    Topic(
        name="railways",
        title="",
        roles=_list("train driver, signaller, station master, railway engineer"),
        orgs=_list("Northern Valley Railway, Grand Junction Line, Coastal Express Company, "
                   "Ironbridge Heritage Railway"),
        settings=_list("the station, the signal box, the engine shed, the platform"),
        things=_list("locomotive, carriage, timetable, signal, track, sleeper car, steam engine, junction, viaduct, "
                     "ticket office, freight wagon, boiler, level crossing, façade"),
        quals=_list("punctual, delayed, electrified, rusty, crowded, historic, overnight, express"),
        actions=_actions(
            "coupled/couple: carriages, wagons",
            "shunted/shunt: freight wagons, locomotive",
            "signalled/signal: express, goods train",
            "oiled/oil: axles, boiler",
            "repainted/repaint: façade, carriages",
            "inspected/inspect: track, viaduct, points",
            "boarded/board: sleeper train, express",
        ),
        measures=_measures(
            ("the train was running {n} minutes late", "How many minutes late was the train running?", 3, 95),
            ("the locomotive hauled {n} carriages", "How many carriages did the locomotive haul?", 4, 14),
            ("the journey was {n} kilometres long", "How many kilometres long was the journey?", 12.5, 480.5),
        ),
        facts=(
            "The {qual} express to {loc2} leaves from platform {n} every hour.",
            "{Who} still remembers the smell of coal and oil from the old engine shed.",
            "Passengers in {loc} complained that the timetable had changed again.",
            "The station façade in {loc} was repainted for the first time in a century.",
            "Every signal on the line is checked twice before the first train leaves.",
            "Nobody at {org} could remember a winter with so many delays.",
        ),
    ),
    Topic(
        name="banking",
        title="",
        roles=_list("bank teller, loan officer, auditor, investment banker"),
        orgs=_list("Granite Savings Bank, Crestline Credit Union, Meridian Trust, Old Town Building Society"),
        settings=_list("the vault, the trading floor, the branch, the counter"),
        things=_list("mortgage, loan, savings account, interest rate, overdraft, cheque, ledger, dividend, pension, "
                     "deposit, currency, invoice, budget, balance sheet"),
        quals=_list("fiscal, profitable, overdue, taxable, monetary, lucrative, quarterly, prudent"),
        actions=_actions(
            "deposited/deposit: cheque, savings",
            "audited/audit: accounts, ledger",
            "approved/approve: mortgage, loan",
            "invested/invest: savings, pension fund",
            "transferred/transfer: funds, deposit",
            "withdrew/withdraw: cash, funds",
            "balanced/balance: ledger, budget",
        ),
        measures=_measures(
            ("the interest rate stood at {n} percent", "At how many percent did the interest rate stand?", 0.5, 7.5),
            ("the loan was worth {n} thousand euros", "How many thousand euros was the loan worth?", 5, 900),
            ("the branch processed {n} cheques before noon", "How many cheques did the branch process before noon?",
             20, 400),
        ),
        facts=(
            "A {qual} budget is the first thing {org} asks for.",
            "{Who} checks the ledger twice before signing anything.",
            "Interest rates in {loc} had not moved for {n} months.",
            "The vault at {org} opens with two keys and a code.",
            "Customers queued outside the branch long before it opened.",
            "An overdue invoice is a small problem until it becomes a large one.",
        ),
    ),
    Topic(
        name="medicine",
        title="Dr.",
        roles=_list("doctor, nurse, surgeon, paramedic, pharmacist"),
        orgs=_list("St. Agnes Hospital, Riverbend Medical Centre, Northside Clinic, Lakeview Health Trust"),
        settings=_list("the ward, the clinic, the operating theatre, the pharmacy"),
        things=_list("fever, stethoscope, prescription, vaccine, bandage, fracture, antibiotic, diagnosis, pulse, "
                     "wound, syringe, symptom, stretcher, cough"),
        quals=_list("feverish, sterile, chronic, clinical, acute, contagious, swollen, painless"),
        actions=_actions(
            "examined/examine: patient, wound, fracture",
            "diagnosed/diagnose: infection, fracture",
            "treated/treat: burn, infection",
            "prescribed/prescribe: antibiotic, painkillers",
            "bandaged/bandage: wound, ankle",
            "vaccinated/vaccinate: children, elderly patients",
            "stitched/stitch: wound, laceration",
        ),
        measures=_measures(
            ("the fever had reached {n} degrees", "How many degrees had the fever reached?", 37.5, 40.5),
            ("the ward held {n} patients", "How many patients did the ward hold?", 8, 40),
            ("the operation lasted {n} minutes", "How many minutes did the operation last?", 30, 300),
        ),
        facts=(
            "A {qual} fever in a small child always needs a second look.",
            "{Who} washes both hands before and after every patient.",
            "The waiting room at {org} was full by eight o'clock.",
            "Nurses in {loc} say that the night shift is the longest.",
            "The new vaccine arrived in {n} insulated boxes.",
            "Nobody on the ward could read the prescription the surgeon had written.",
        ),
    ),
    Topic(
        name="birds",
        title="",
        roles=_list("birdwatcher, ornithologist, wildlife warden, bird ringer"),
        orgs=_list("Kestrel Ornithological Trust, Marshland Bird Reserve, Wetland Wildlife Society, "
                   "Heron Point Field Centre"),
        settings=_list("the bird hide, the reed bed, the wetland, the heath"),
        things=_list("heron, kingfisher, owl, swallow, binoculars, nest, feather, wren, kestrel, warbler, osprey, "
                     "migration, birdsong, robin"),
        quals=_list("feathered, migratory, nocturnal, elusive, speckled, plumed, wading, songful"),
        actions=_actions(
            "spotted/spot: kingfisher, heron, osprey",
            "ringed/ring: chicks, swallows",
            "sketched/sketch: owl, warbler",
            "identified/identify: birdsong, warbler",
            "tallied/tally: geese, waders",
            "fed/feed: robins, sparrows",
        ),
        measures=_measures(
            ("the flock numbered {n} geese", "How many geese did the flock number?", 40, 900),
            ("the heron stood {n} metres from the hide", "How many metres from the hide did the heron stand?",
             2.5, 30.5),
            ("the wingspan measured {n} centimetres", "How many centimetres did the wingspan measure?", 15, 190),
        ),
        facts=(
            "A {qual} owl is heard far more often than it is seen.",
            "{Who} can name a warbler from a single note of its song.",
            "Every autumn, swallows gather on the wires above {loc} before flying south.",
            "Members of {org} counted {n} species in a single morning.",
            "The binoculars were old, but the lenses were still clear.",
            "Nobody spoke in the bird hide while the kingfisher was fishing.",
        ),
    ),
    Topic(
        name="mountaineering",
        title="",
        roles=_list("mountaineer, mountain guide, climber, alpinist"),
        orgs=_list("Alpine Rescue Team, High Ridge Climbing Club, Summit Expeditions, Glacier Guides Association"),
        settings=_list("the base camp, the ridge, the glacier, the mountain hut"),
        things=_list("ice axe, crampons, rope, summit, crevasse, harness, carabiner, avalanche, peak, rucksack, tent, "
                     "altitude, cornice, headlamp"),
        quals=_list("icy, steep, rocky, snowy, exposed, alpine, rugged, sheer"),
        actions=_actions(
            "climbed/climb: north face, couloir, ridge",
            "belayed/belay: climbing partner, rope team",
            "abseiled/abseil: cliff, rock face",
            "traversed/traverse: glacier, ridge",
            "pitched/pitch: tent, bivouac",
            "sharpened/sharpen: ice axe, crampons",
        ),
        measures=_measures(
            ("the summit stood at {n} metres", "At how many metres did the summit stand?", 2800, 8400),
            ("the climb took {n} hours", "How many hours did the climb take?", 3.5, 14.5),
            ("the rucksack held {n} kilograms of gear", "How many kilograms of gear did the rucksack hold?", 8, 28),
        ),
        facts=(
            "A {qual} ridge looks easy from below and terrifying from above.",
            "{Who} never leaves the mountain hut without a headlamp and spare gloves.",
            "Guides in {loc} had warned of avalanches after the fresh snow.",
            "The rope team moved slowly across the glacier, one step at a time.",
            "From the summit, the valley below looked like a green ribbon.",
            "Members of {org} have climbed the north face {n} times.",
        ),
    ),
    Topic(
        name="programming",
        title="",
        roles=_list("programmer, software developer, systems administrator, web developer"),
        orgs=_list("Bytewise Software, Nimbus Data Systems, Quantum Pixel Labs, Lambda Works"),
        settings=_list("the server room, the standup meeting, the hackathon, the basement lab"),
        things=_list("compiler, database, function, algorithm, bug, unit test, server, keyboard, repository, "
                     "stack trace, variable, laptop, pull request, codebase"),
        quals=_list("recursive, asynchronous, buggy, deprecated, scalable, modular, legacy, concurrent"),
        actions=_actions(
            "debugged/debug: function, parser, memory leak",
            "compiled/compile: kernel, project",
            "refactored/refactor: codebase, module",
            "deployed/deploy: service, release",
            "profiled/profile: query, loop",
            "merged/merge: pull request, patch",
            "optimised/optimise: query, algorithm",
        ),
        measures=_measures(
            ("the test suite ran in {n} seconds", "In how many seconds did the test suite run?", 0.5, 95.5),
            ("the pull request changed {n} lines of code", "How many lines of code did the pull request change?",
             3, 900),
            ("the server handled {n} requests per second", "How many requests per second did the server handle?",
             100, 9000),
        ),
        facts=(
            "A {qual} function is easy to write and hard to debug.",
            "{Who} keeps a rubber duck on the desk for explaining bugs out loud.",
            "The build at {org} broke twice before lunch.",
            "Developers in {loc} argued for {n} minutes about tabs and spaces.",
            "Nobody wanted to touch the legacy database after the last outage.",
            "Every commit has to pass the unit tests before it reaches the server.",
        ),
    ),
)

# Shared words. A few names and places are non-ASCII on purpose, so Unicode handling is exercised.
FEMALE_NAMES = _list("Marta, Anna, Chloé, Zoë, Ingrid, Priya, Grace, Noémie, Amara, Hana, Lucía, Fatima, Elena, "
                     "Ruth, Mei, Sofia, Renée, Olga, Aisha, Freya")
MALE_NAMES = _list("José, Björn, François, Tomás, Jonas, Daniel, Kofi, Hiroshi, Liam, Omar, Mateus, Pavel, Jürgen, "
                   "Arjun, Samuel, Felix, Ángel, Erik, Yusuf, Niall")
SURNAMES = _list("Silva, Kowalski, Novak, Okafor, Lindqvist, Moreau, Tanaka, Haddad, Müller, García, Petrov, "
                 "Nakamura, Andersen, Costa, Rossi, Dubois, Nuñez, Brennan, O'Neill, Dvořák, Mensah, Kaur, Larsen, "
                 "Ferreira, Ibáñez, Achebe, Sato, Horvat, Quinn, Varga")
PLACES = _list("Zürich, São Paulo, Malmö, Kraków, Reykjavík, Bogotá, Montréal, St. Ives, St. Gallen, Lisbon, Oslo, "
               "Dublin, Lyon, Porto, Nairobi, Toronto, Bristol, Melbourne, Kyoto, Valparaíso, Cádiz, Cape Town, "
               "Buenos Aires, Rio de Janeiro, Edinburgh, Hamburg, Accra, Wellington, Tromsø, Seville")
PERSON_ADJECTIVES = _list("modest, young, careful, cheerful, talented, quiet, determined, stubborn")
SEASONS = _list("spring, summer, autumn, winter")
DAYS = _list("Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday")
DAY_PARTS = _list("morning, afternoon, evening")
HONORIFICS = {"F": ("Mrs.", "Ms."), "M": ("Mr.",)}

# ----------------------------------------------------------------------------------------------------
# Templates. Slots are {name}; a capitalised slot name ({Who}) capitalises its value at sentence start.
# ----------------------------------------------------------------------------------------------------


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


def T(text: str, *questions: Question) -> Template:
    return Template(text, questions)


Q = Question

INTRO = (
    T("{Full} is {a_role} from {loc} who works for {org}.",
      Q("Where is {first} from?", "loc"), Q("Which organisation does {first} work for?", "org")),
    T("This is the story of {full}, a {person_adj} {role} who lives in {loc}.",
      Q("Where does {first} live?", "loc")),
    T("{Full} has worked as {a_role} in {loc} for {years} years, most of them with {org}.",
      Q("How many years has {first} worked as {a_role}?", "years"), Q("In which city does {first} work?", "loc")),
    T("Every {season}, {full} leaves {loc} to spend a few weeks with the people at {org}.",
      Q("Which city does {first} leave every {season}?", "loc"),
      Q("Where does {first} spend a few weeks every {season}?", "org")),
    T("{Full}, {a_role} born in {loc}, joined {org} {years} years ago.",
      Q("How many years ago did {first} join {org}?", "years"), Q("Where was {first} born?", "loc")),
    T("Ask anyone in {loc} about {full}, and they will tell you about the best {role} at {org}.",
      Q("Where is {first} the best {role}?", "org")),
)

EVENT = (
    T("{Time}, {who} {verb} the {what} in {setting}.",
      Q("Who {verb} the {what} in {setting}?", "who", entity=True), Q("What did {first} {base} in {setting}?", "what")),
    T("{Time}, {who} {verb} the {what} for {org}, which took about {n} minutes.",
      Q("For which organisation did {first} {base} the {what}?", "org"),
      Q("How many minutes did it take {first} to {base} the {what}?", "n")),
    T("With help from {partner}, {who} {verb} the {what} and then {verb2} the {what2}.",
      Q("Who helped {first} {base} the {what}?", "partner", entity=True),
      Q("What did {first} {base2} after the {what}?", "what2")),
    T("{Time}, {who} travelled to {loc2} to {base} the {what} there.",
      Q("Where did {first} travel to {base} the {what}?", "loc2")),
    T("{Who} {verb} the {what} slowly, because the {thing} was still far too {qual}.",
      Q("What did {first} {base} slowly?", "what")),
    T("{Time}, {who} {verb} the {what} while {partner} waited in {setting}.",
      Q("Who waited in {setting} while {first} {verb} the {what}?", "partner", entity=True)),
    T("{Time}, {who} {verb} the {what} twice, just to be sure.",
      Q("What did {first} {base} twice?", "what")),
    T("{Who} {verb} the {what}, {verb2} the {what2} and still found time for a short break.",
      Q("What did {first} {base2}?", "what2")),
    # Long sentences, so lengths reach the thirties as in real text.
    T("{Time}, after a long conversation with {partner} about the {thing} and the {thing2}, {who} finally "
      "{verb} the {what} in {setting} and went home early.",
      Q("What did {first} finally {base} in {setting}?", "what")),
    T("Although the {thing} had been {qual} all week and nobody at {org} expected very much, {who} {verb} "
      "the {what} and then {verb2} the {what2} before anyone else had even noticed.",
      Q("What did {first} {base} although nobody at {org} expected very much?", "what")),
)

DIALOGUE = (
    T('"The {thing} looks {qual} today," {who} said.'),
    T('{Who} turned to {partner} and asked, "Is the {thing} {qual} enough?"'),
    T('"Give me {n} more minutes with the {thing}," {who} told {partner}.',
      Q("How many more minutes did {first} ask for?", "n")),
    T('"Is this {qual} enough?" {who} asked.'),
    T('"I have never seen such {a_qual} {thing} in {loc}," said {partner}.'),
    T('"That was a naïve mistake with the {thing}," {who} admitted later.'),
    T('"It feels like déjà vu," {who} said, looking at the {qual} {thing}.'),
    T('"If the {thing} is still {qual} tomorrow morning, we will have to {base} the {what} again and explain it '
      'to everyone at {org}," {who} told {partner}.'),
)

INTERROGATIVE = (
    T("Would the {thing} be {qual} enough by {day}?"),
    T("Why was the {thing} so {qual} this time?"),
    T("What would the people at {org} say about the {qual} {thing}?"),
    T("Could {who} really {base} the {what} before {day}?"),
    T("Was it the {thing} or the {thing2} that worried {who} most?"),
)

# Abbreviations and decimals inside sentences make sentence segmentation non-trivial.
ABBREVIATION = (
    T("{Who} brought a few essentials, e.g. the {thing}, the {thing2} and the {thing3}."),
    T("{Time}, {who} met {mr} from {org} to talk about the {thing}.",
      Q("Who did {first} meet from {org}?", "mr", entity=True)),
    T("The plan was simple, i.e. {base} the {what} first and worry about the {thing} later."),
    T("{Who} waited {x} hours for the {thing}, which felt much longer.",
      Q("How many hours did {first} wait for the {thing}?", "x")),
)

PARTNER = (
    T("{Time}, {partner}, {a_role2} from {ploc}, joined {who} in {setting}.",
      Q("Where is {partner_first} from?", "ploc")),
    T("{Partner} had come all the way from {ploc} to see the {thing}.",
      Q("Where had {partner_first} come from?", "ploc")),
)

CONCLUSION = (
    T("In the end, {who} was proud of the {what}, and so was everyone at {org}."),
    T("{Who} says it was the best week at {org} in {years} years."),
    T("Looking back, {who} thought the {qual} {thing} had been worth every minute."),
    T("It was a long week, but {who} would gladly do it all again in {loc}."),
    T("{Who} went home to {loc} that night, tired but happy."),
    T("By {day} evening, the {thing} was finally {qual}, and {who} could rest at last."),
)

MEASURE_FRAMES = ("{Time}, {measure}.", "{Who} noted that {measure}.", "According to {org}, {measure}.")

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
        return T(frame, Q(measure.question, "n")), measure
    if kind == "fact":
        return T(rng.choice(topic.facts)), None
    shared = {"intro": INTRO, "event": EVENT, "dialogue": DIALOGUE, "question": INTERROGATIVE,
              "abbreviation": ABBREVIATION, "partner": PARTNER, "conclusion": CONCLUSION}
    return rng.choice(shared[kind]), None


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
    templates = [template for group in (INTRO, EVENT, DIALOGUE, INTERROGATIVE, ABBREVIATION, PARTNER, CONCLUSION)
                 for template in group]
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
POSITIVE_WORDS = _list("excellent, wonderful, superb, delightful, brilliant, fantastic, lovely, impressive, "
                       "outstanding, charming")
NEGATIVE_WORDS = _list("terrible, awful, disappointing, dreadful, poor, mediocre, miserable, shoddy, horrible, dismal")
POSITIVE_VERDICTS = _list("I would happily come back, it was worth every penny, we will definitely return, "
                          "I recommend it to everyone, it made my day")
NEGATIVE_VERDICTS = _list("I will not be coming back, it was a complete waste of money, avoid it if you can, "
                          "I regret going, it ruined my day")
SENTIMENT_TEMPLATES = (
    "The {thing} at {org} was {adj}.",
    "The {thing} at {org} was {adj}, and {verdict}.",
    "{Adj} {thing} and {adj2} service at {org}; {verdict}.",
    "We tried the {qual} {thing} in {loc} and it was {adj}.",
    "I thought the {thing} would be {opp}, but it was actually {adj}.",
    "The {thing} was {opp}, but the {thing2} was {adj}, so overall {verdict}.",
    "{Stars}: the {qual} {thing} from {org} was {adj}.",
    "Honestly, the {thing} at {org} was {negated}.",
)


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
NLI_PREMISES = (
    "On {day}, {per} {verb} the {what} in {loc}.",
    "{per}, {a_role}, {verb} the {what} in {loc} on {day}.",
    "In {loc} on {day}, {per} {verb} the {what} for {org}.",
)
NLI_HYPOTHESES = {
    "entailment": (
        "{per} {verb} the {obj}.",
        "Someone {verb} the {what} on {day}.",
        "{first} was in {loc} on {day}.",
        "{first} {verb} something in {loc}.",
    ),
    "contradiction": (
        "{per} did not {base} the {what} on {day}.",
        "{first} spent all of {day} in {other_loc}, far away from {loc}.",
        "Nobody {verb} the {what} on {day}.",
        "{first} refused to {base} the {obj}.",
    ),
    "neutral": (
        "{per} {verb} the {what} because a friend asked for it.",
        "{first} also {verb2} the {what2} that week.",
        "{first} felt tired on {day} evening.",
        "{per} {verb} the {what} with a friend from {other_loc}.",
        "{first} will {base} the {obj} again next {season}.",
    ),
}
NLI_LABELS = ("entailment", "contradiction", "neutral")


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
Everything here is written by `generate.py` (Python standard library only) and is byte-for-byte
reproducible; this README is generated too, so edit the script rather than the files.

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
