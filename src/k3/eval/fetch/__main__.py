"""`python -m k3.eval.fetch`: every pinned package the evaluations read, fetched once (set-up; `make test` runs it).
Apart from the library (__init__.py), which the modules that declare pins import: those imports go one way."""

from __future__ import annotations

import sys

from k3.eval import schema_corpus, sets
from k3.eval.challenge import loading, source, spec
from k3.eval.fetch import FetchError, path


def main() -> int:
    try:
        print(f"{path(source.pin(loading.load(spec.INFLECTION)), fetch=True)}")
        for pin in [*sets.PINS.values(), *schema_corpus.PINS.values()]:
            print(f"{path(pin, fetch=True)}")
    except (FetchError, ValueError) as e:
        print(f"k3 fetch: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
