"""Filler for the constraint sweep: varied, deterministic exchanges (a note to read, a sum to do) whose
canned answers obey the rule under test, as a real conversation's earlier answers would. Generated, so
a sweep can reach any length without a corpus, and worded so no two notes repeat."""

from __future__ import annotations

import json
import random

ADJ = ("quiet", "amber", "narrow", "restless", "northern", "hollow", "patient", "bright", "distant", "ancient", "wet",
       "silver", "crooked", "gentle", "heavy", "open")
NOUN = ("ferry", "orchard", "lantern", "harbour", "archive", "meadow", "engine", "bridge", "library", "garden", "tower",
        "market", "kettle", "compass", "river", "workshop")
VERB = ("passes", "guards", "faces", "follows", "shelters", "outlasts", "mirrors", "crosses", "awaits", "circles")
PLACE = ("the old mill", "the east gate", "the square", "the far shore", "the hill road", "the station", "the quay")
ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen").split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def words(n: int) -> str:
    """0 <= n < 1000 in English words ("one hundred and forty-two")."""
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    rest = n % 100
    return ONES[n // 100] + " hundred" + ("" if rest == 0 else " and " + words(rest))


def exchange(rng: random.Random, sentences: int = 3) -> tuple[str, str]:
    """(a user turn: a note then a sum, the answer in words)."""
    note = " ".join(f"The {rng.choice(ADJ)} {rng.choice(NOUN)} {rng.choice(VERB)} the {rng.choice(ADJ)} "
                    f"{rng.choice(NOUN)} near {rng.choice(PLACE)}." for _ in range(sentences))
    a, b = rng.randrange(1, 500), rng.randrange(1, 499)
    return f"Here is a note to keep in mind: {note}\nNow, what is {words(a)} plus {words(b)}?", words(a + b).capitalize()


def comply(check: str, answer: str) -> str:
    """A canned answer that obeys the rule."""
    if check == "upper":
        return answer.upper()
    if check.startswith("suffix:"):
        return f"{answer}. {check.split(':', 1)[1]}"
    if check == "json_answer":
        return json.dumps({"answer": answer})
    return answer


def conversation(rule: dict, final: str, exchanges: int, seed: int) -> list[dict]:
    """The rule with a first question, `exchanges` filler exchanges answered within the rule, the final question."""
    rng = random.Random(seed)
    msgs = [{"role": "user", "content": f"{rule['instruction']} First question: what is two plus two?"},
            {"role": "assistant", "content": comply(rule["check"], "Four")}]
    for _ in range(exchanges):
        question, answer = exchange(rng)
        msgs += [{"role": "user", "content": question}, {"role": "assistant", "content": comply(rule["check"], answer)}]
    return msgs + [{"role": "user", "content": final}]
