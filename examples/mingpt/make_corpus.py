"""Writes corpus.txt, the text the minGPT example learns: short verses generated from
a small grammar written for this repository (nothing is downloaded, and the text is
ours to ship). A grammar gives the model structure worth learning, spelling, rhyme-
less meter and repeated phrases, in a few kilobytes.

    python examples/mingpt/make_corpus.py [--chars 12000] [--seed 7]
"""
import argparse
import os
import random

SUBJECTS = ["the keeper", "the old miller", "a quiet river", "the north wind", "my sister",
            "the lantern", "a grey heron", "the ferryman", "the orchard", "a small boat",
            "the harbour bell", "the weaver", "the morning tide", "a tired horse"]
VERBS = ["carries", "remembers", "follows", "waits for", "sings to", "mends", "counts",
         "watches", "calls", "gathers", "keeps", "forgets"]
OBJECTS = ["the evening light", "seven stones", "the salt road", "a letter home",
           "the last of the apples", "the long field", "a thread of smoke", "the bridge",
           "the winter stars", "an empty net", "the baker's bread", "the hill path"]
PLACES = ["by the water", "under the elms", "past the mill", "at the edge of town",
          "beside the wall", "in the yard", "on the cold shore", "below the hill"]
TIMES = ["at dawn", "before the rain", "when the lamps are lit", "all through the night",
         "in the slow noon", "after the harvest", "when the bells ring"]
TITLES = ["THE KEEPER", "SONG OF THE MILL", "LOW TIDE", "THE FERRY", "ORCHARD WALK",
          "WINTER ROAD", "THE WEAVER'S ROOM", "HARBOUR EVENING"]


def line(rng):
    """One line of verse: subject, verb, object, and sometimes a place or a time."""
    words = [rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS)]
    extra = rng.random()
    if extra < 0.4:
        words.append(rng.choice(PLACES))
    elif extra < 0.7:
        words.append(rng.choice(TIMES))
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice([",", ",", ".", ";", "."])


def verse(rng):
    lines = [line(rng) for _ in range(rng.randint(3, 5))]
    lines[-1] = lines[-1][:-1] + "."
    return "\n".join(lines)


def corpus(chars, seed):
    rng = random.Random(seed)
    parts, size = [], 0
    while size < chars:
        poem = rng.choice(TITLES) + "\n\n" + "\n\n".join(verse(rng) for _ in range(2)) + "\n\n"
        parts.append(poem)
        size += len(poem)
    return "".join(parts)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chars", type=int, default=12000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "corpus.txt"))
    args = p.parse_args()
    text = corpus(args.chars, args.seed)
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {len(text)} characters ({len(set(text))} distinct) to {args.out}")


if __name__ == "__main__":
    main()
