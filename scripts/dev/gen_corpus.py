#!/usr/bin/env python3
"""Writes a varied text corpus of about SIZE bytes built from a seed text, for scripts/dev/bench_data.sh.

Not the seed repeated: lines are drawn at random from the seed text, and a third of them are replaced
by a 'salad' of words drawn at random from the seed's word stream (so word frequencies stay natural but
almost no line repeats) mixed with 100,000 made-up words (the front of one seed word joined to the back
of another: a long tail of rare words, as a real corpus has), which gives BPE a real vocabulary to learn
and encode.
  scripts/dev/gen_corpus.py SEED_TEXT SIZE_MB OUT [--seed N]
"""
import argparse
import random

ap = argparse.ArgumentParser()
ap.add_argument("seed_text")
ap.add_argument("size_mb", type=float)
ap.add_argument("out")
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()
rng = random.Random(a.seed)
text = open(a.seed_text, encoding="utf-8").read()
lines = [l for l in text.split("\n") if l.strip()]
words = text.split()
rare = set()
while len(rare) < 100000:
    front, back = rng.choice(words), rng.choice(words)
    rare.add(front[: max(1, len(front) // 2)] + back[len(back) // 2 :])
pool = words + sorted(rare)  # a third of a salad's words are made up
target = int(a.size_mb * 1e6)
written = 0
with open(a.out, "w", encoding="utf-8") as f:
    while written < target:
        block = rng.choices(lines, k=20000)
        for i in range(0, len(block), 3):  # every third line: a salad of 3-12 random words
            block[i] = " ".join(rng.choices(pool, k=rng.randint(3, 12)))
        s = "\n".join(block) + "\n"
        s = s[: target - written] if written + len(s) > target else s
        f.write(s)
        written += len(s.encode("utf-8"))
