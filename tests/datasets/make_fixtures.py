#!/usr/bin/env python3
"""Writes the small dataset fixtures of tests/datasets (run from any folder).

Every text here is invented for the tests (fictional places and facts); no
corpus text is copied. The files use the real formats of the "Lost in the
Middle" benchmark (kv-retrieval-*.jsonl.gz, nq-open-*.jsonl.gz) and of
BABILong (input/question/target JSON lines).
"""
import gzip
import json
import pathlib
import random
import uuid

HERE = pathlib.Path(__file__).resolve().parent / "fixtures"

# (question, answers, gold title, gold text) -- all fictional.
FACTS = [
    ("what colour is the roof of the halvard lighthouse", ["red"], "Halvard Lighthouse",
     "The Halvard Lighthouse stands on a granite spur. Its roof is painted red so boats can spot it in fog."),
    ("who founded the village of brenmoor", ["Ada Kessel"], "Brenmoor",
     "Brenmoor is a small hill village. It was founded by Ada Kessel, a weaver who settled there with her family."),
    ("how many bridges cross the river tolv", ["seven", "7"], "River Tolv",
     "The River Tolv winds through three valleys. Seven bridges cross it, the oldest made of timber."),
    ("what instrument did oskar lume play", ["the cello", "cello"], "Oskar Lume",
     "Oskar Lume was a touring musician. He played the cello in a quartet that travelled by train."),
    ("in which year did the quarry at vessby close", ["1931"], "Vessby Quarry",
     "The quarry at Vessby produced pale stone for decades. It closed in 1931 after flooding."),
    ("what is the national bird of the isle of marrow", ["the grey heron", "grey heron"], "Isle of Marrow",
     "The Isle of Marrow chose the grey heron as its national bird because herons nest on every shore."),
    ("which mountain overlooks the town of saddle creek", ["Mount Orrin"], "Saddle Creek",
     "Saddle Creek sits in a wide basin. Mount Orrin overlooks the town from the north."),
    ("what fruit is the festival of pellan named after", ["plums", "plum"], "Pellan Festival",
     "Every autumn the people of Pellan hold a festival named after plums, which grow in every garden."),
    ("who designed the glass dome of the arvel library", ["Ines Maro"], "Arvel Library",
     "The Arvel Library is known for its glass dome, designed by the architect Ines Maro."),
    ("what language is spoken on the farrow islands", ["Farrish"], "Farrow Islands",
     "On the Farrow Islands most people speak Farrish, a language with many words for wind."),
    ("how long is the tunnel under the kelby pass", ["four kilometres", "4 km"], "Kelby Pass",
     "A tunnel runs under the Kelby Pass. It is four kilometres long and opened to trains first."),
    ("what animal appears on the flag of dunmere", ["a fox", "fox"], "Dunmere",
     "The flag of Dunmere shows a fox on a green field, honouring the foxes of its forests."),
]

DISTRACTORS = [
    ("Weather of the Plains", "The plains see long dry summers and short wet winters with strong winds."),
    ("Harbour Trade", "Merchants in the harbour trade salt, wool and dried fish with passing ships."),
    ("Old Roads", "Many old roads follow the paths that shepherds used to move their flocks."),
    ("Bakery Guild", "The bakery guild sets the price of bread each spring after the first harvest."),
    ("Night Markets", "Night markets open after sunset and sell lanterns, spices and wooden toys."),
    ("Canal Locks", "Canal locks raise and lower boats between stretches of water at different heights."),
]


def qa_records(with_distractors):
    records = []
    for i, (question, answers, title, text) in enumerate(FACTS):
        gold = {"title": title, "text": text, "hasanswer": True, "isgold": True}
        if not with_distractors:
            records.append({"question": question, "answers": answers, "ctxs": [gold]})
            continue
        ctxs = []
        for j in range(3):
            d_title, d_text = DISTRACTORS[(i + j) % len(DISTRACTORS)]
            ctxs.append({"title": d_title, "text": d_text, "hasanswer": False, "isgold": False})
        ctxs.insert(i % 4, gold)
        records.append({"question": question, "answers": answers, "ctxs": ctxs})
    return records


def kv_records():
    rng = random.Random(20261121)
    records = []
    for _ in range(10):
        pairs = [[str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(2)] for _ in range(6)]
        gold = pairs[rng.randrange(6)]
        records.append({"ordered_kv_records": pairs, "key": gold[0], "value": gold[1]})
    return records


def babilong_records():
    people = ["Mira", "Tomas", "Ilse", "Jonah"]
    items = ["the lantern", "the kettle", "the map", "the key"]
    places = ["bathroom", "bedroom", "garden", "hallway", "kitchen", "office"]
    filler = ["The wind moved the curtains.", "A clock ticked somewhere.", "Rain tapped on the glass.",
              "A dog barked far away.", "The stairs creaked softly."]
    rng = random.Random(7)
    records = []
    for i in range(12):
        person, item = people[i % 4], items[i % 4]
        first, second = rng.sample(places, 2)
        facts = [f"{person} went to the {first}.", f"{person} picked up {item}.",
                 f"{person} travelled to the {second}."]
        sentences = []
        for fact in facts:
            sentences += rng.sample(filler, 2) + [fact]
        # Trailing filler puts the last fact near the end, the middle or the start.
        sentences += [rng.choice(filler) for _ in range((1, 10, 60)[i % 3])]
        records.append({"input": " ".join(sentences), "question": f"Where is {item}?", "target": second})
    return records


def write_gz(name, records):
    with gzip.GzipFile(HERE / name, "wb", mtime=0) as f:
        for record in records:
            f.write((json.dumps(record) + "\n").encode())


def main():
    HERE.mkdir(exist_ok=True)
    write_gz("kv-retrieval-6_keys-fixture.jsonl.gz", kv_records())
    write_gz("nq-open-4_total_documents-fixture.jsonl.gz", qa_records(True))
    write_gz("nq-open-oracle-fixture.jsonl.gz", qa_records(False))
    with open(HERE / "babilong-qa2-fixture.jsonl", "w") as f:
        for record in babilong_records():
            f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
